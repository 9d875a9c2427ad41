package batcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The validators below run New's own checks on one piece of configuration
// without building anything, so that a program reading a config file can
// report every bad setting at load, under its own names for the fields,
// instead of copying the rules. Each bad setting is a *SettingError (find
// it with errors.As): the setting's path and the reason, which read as New's
// errors do, for example
// `backend "sim" retry: budget window: must be at least 1s, got 500ms`.

// SettingError is a setting that New, Reconfigure or a validator refuses:
// which one, and why.
type SettingError struct {
	// Owner is what the setting belongs to, in the core's words:
	// `backend "sim"` or `route "chat"`; "backend" or "route" when the
	// setting is the missing name itself; empty for a batcher-wide option.
	Owner string
	// Path names the setting below its owner: steps in snake_case joined
	// by dots, as "max_batch_size", "retry.budget_window", "cache.ttl",
	// "urgent_delay" or "fallbacks[0]".
	Path string
	// Reason says what is wrong with the value, usually starting with
	// "must": "must be at least 1, got 0".
	Reason string
}

// Error reads "<owner> <path in words>: <reason>", the path's steps
// separated by ": " and its underscores spaces: `route "chat" max batch
// size: must be at least 1, got 0`.
func (e *SettingError) Error() string {
	var b strings.Builder
	if e.Owner != "" {
		b.WriteString(e.Owner)
		b.WriteByte(' ')
	}
	for i, step := range strings.Split(e.Path, ".") {
		if i > 0 {
			b.WriteString(": ")
		}
		b.WriteString(strings.ReplaceAll(step, "_", " "))
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// badSetting returns a *SettingError for path.
func badSetting(path, format string, args ...any) *SettingError {
	return &SettingError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// settingOf returns err's setting under owner and the path step parent
// ("" for none), or err unchanged when it is no *SettingError.
func settingOf(owner, parent string, err error) error {
	var se *SettingError
	if !errors.As(err, &se) {
		return err
	}
	out := *se
	out.Owner = owner
	if parent != "" {
		out.Path = parent + "." + se.Path
	}
	return &out
}

// ValidateBackend checks b's settings as New does. b.Backend may be nil.
func ValidateBackend(b BackendConfig) error {
	if b.Backend == nil {
		b.Backend = BackendFunc(func(context.Context, *Batch, []Response) error { return nil })
	}
	_, err := resolveBackend(b)
	return err
}

// ValidateRoute checks r's own settings as New does; whether the backends
// it names exist is New's to check.
func ValidateRoute(r Route) error {
	_, err := resolveRoute(r)
	return err
}

// ValidateOptions checks the batcher-wide options among opts (queue
// capacity and timeout, aging step, idle lane timeout) as New does;
// backends and routes among them are not checked. Each bad option is a
// *SettingError among the joined errors.
func ValidateOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}
