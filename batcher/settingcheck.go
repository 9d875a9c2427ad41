package batcher

import "context"

// The validators below run New's own checks on one piece of configuration
// without building anything, so that a program reading a config file can
// report every bad setting at load, under its own names for the fields,
// instead of copying the rules. Their errors read as New's do: the field
// in the core's words, then a reason that starts with "must", for example
// `backend "sim" retry: budget window: must be at least 1s, got 500ms`.

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
// backends and routes among them are not checked.
func ValidateOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}
