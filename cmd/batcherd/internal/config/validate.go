package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// The backend types.
const (
	TypeSim       = "sim"
	TypeOpenAI    = "openai"
	TypeAnthropic = "anthropic"
)

// types lists the backend types for messages.
const types = TypeSim + ", " + TypeOpenAI + " or " + TypeAnthropic

var operations = map[string]batcher.Operation{
	"chat":       batcher.OpChat,
	"completion": batcher.OpCompletion,
	"embedding":  batcher.OpEmbedding,
}

// FieldError is a bad setting of the configuration: its YAML path and
// why. Validate's errors are FieldErrors, joined; find one with errors.As.
type FieldError struct {
	// Path is the setting's YAML path: "routes[2].batching.max_batch_size".
	Path string
	// Reason says what is wrong: "must be at least 1, got 0".
	Reason string
	// Err is the component's error the reason comes from (a
	// *batcher.SettingError where the core or the server refused the
	// setting), or nil.
	Err error
	// Source names where the value came from when it was not the file:
	// "--queue-capacity" or "BATCHER_QUEUE_CAPACITY" (Load sets it).
	Source string
}

// Error reads "<path>: <reason>", or "<path> (<source>): <reason>".
func (e *FieldError) Error() string {
	if e.Source != "" {
		return e.Path + " (" + e.Source + "): " + e.Reason
	}
	return e.Path + ": " + e.Reason
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// errs collects field errors.
type errs []error

func (e *errs) add(path, format string, args ...any) {
	*e = append(*e, &FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// Validate reports every bad field of c, each error naming its path.
func (c *Config) Validate() error {
	var e errs
	c.validateJobs(&e)
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		e.add("listen", "must be host:port, got %q", c.Listen)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		e.add("listen", "port must be 0 to 65535, got %q", port)
	}
	if _, err := c.Log.SlogLevel(); err != nil {
		e.add("log.level", "%v", err)
	}
	if f := c.Log.Format; f != "json" && f != "text" {
		e.add("log.format", "must be json or text, got %q", f)
	}
	if c.DrainTimeout <= 0 {
		e.add("drain_timeout", "must be positive, got %v", c.DrainTimeout)
	}
	c.Security.validate(c.Listen, &e)
	c.HTTP.validate(&c.Security, &e)
	c.Telemetry.validate(&c.Security, &e)
	c.Fleet.validate(&e)
	c.Cache.validate(&e)
	c.validateComponents(&e)
	backends := c.validateBackends(&e)
	c.validateRoutes(backends, &e)
	return errors.Join(e...)
}

// uniqueName checks the name of list[i]: set, and no earlier entry's.
// seen holds each earlier entry's index by name; name joins it.
func (e *errs) uniqueName(seen map[string]int, list string, i int, name string) {
	path := fmt.Sprintf("%s[%d].name", list, i)
	switch j, dup := seen[name]; {
	case name == "":
		e.add(path, "must not be empty")
	case dup:
		e.add(path, "%q is already the name of %s[%d]", name, list, j)
	default:
		seen[name] = i
	}
}

// validateBackends checks each backend's name and type and returns the
// index of each backend by name.
func (c *Config) validateBackends(e *errs) map[string]int {
	backends := map[string]int{}
	for i := range c.Backends {
		b := &c.Backends[i]
		path := fmt.Sprintf("backends[%d]", i)
		e.uniqueName(backends, "backends", i, b.Name)
		switch b.Type {
		case TypeSim:
			if err := b.simConfig().Validate(); err != nil {
				for _, err := range unjoin(err) {
					*e = append(*e, fmt.Errorf("%s.sim.%w", path, err))
				}
			}
		case TypeOpenAI:
			o := b.OpenAI
			if o == nil {
				o = &OpenAI{}
			}
			o.validate(path+".openai", b.Name, c, e)
		case TypeAnthropic:
			a := b.Anthropic
			if a == nil {
				a = &Anthropic{}
			}
			a.validate(path+".anthropic", e)
		case "":
			e.add(path+".type", "must be set: want %s", types)
		default:
			e.add(path+".type", "unknown type %q: want %s", b.Type, types)
		}
		if b.Sim != nil && b.Type != TypeSim && b.Type != "" {
			e.add(path+".sim", "only for type %s, got type %q", TypeSim, b.Type)
		}
		if b.OpenAI != nil && b.Type != TypeOpenAI && b.Type != "" {
			e.add(path+".openai", "only for type %s, got type %q", TypeOpenAI, b.Type)
		}
		if b.Anthropic != nil && b.Type != TypeAnthropic && b.Type != "" {
			e.add(path+".anthropic", "only for type %s, got type %q", TypeAnthropic, b.Type)
		}
	}
	return backends
}

// validateRoutes checks each route's name, operation, backends, batch API
// and price against the backends (by name).
func (c *Config) validateRoutes(backends map[string]int, e *errs) {
	if len(c.Routes) == 0 {
		e.add("routes", "at least one route is needed")
	}
	routes := map[string]int{}
	for i := range c.Routes {
		r := &c.Routes[i]
		path := fmt.Sprintf("routes[%d]", i)
		e.uniqueName(routes, "routes", i, r.Name)
		if _, ok := operations[r.Operation]; !ok {
			e.add(path+".operation", "must be chat, completion or embedding, got %q", r.Operation)
		}
		if j, ok := backends[r.Backend]; ok && c.Backends[j].Type == TypeAnthropic && r.Operation != "chat" && r.Operation != "" {
			e.add(path+".operation", "backend %q is of type %s, which serves chat only, got %q", r.Backend, TypeAnthropic, r.Operation)
		}
		if _, ok := backends[r.Backend]; !ok {
			if r.Backend == "" {
				e.add(path+".backend", "must name a backend (%s)", names(backends))
			} else {
				e.add(path+".backend", "no backend named %q (%s)", r.Backend, names(backends))
			}
		}
		if ba := r.BatchAPI; ba != nil {
			if j, ok := backends[r.Backend]; ok && c.Backends[j].Type != TypeOpenAI && c.Backends[j].Type != TypeAnthropic {
				e.add(path+".batch_api", "backend %q is of type %s, which has no batch API (openai and anthropic have)", r.Backend, c.Backends[j].Type)
			}
			if ba.MaxRequests < 0 || ba.MaxBytes < 0 || ba.Gather < 0 || ba.PollMin < 0 || ba.PollMax < 0 || ba.MaxEnqueuedTokens < 0 || ba.CreateTimeout < 0 {
				e.add(path+".batch_api", "max_requests, max_bytes, gather, poll_min, poll_max, max_enqueued_tokens and create_timeout must not be negative")
			}
		}
		if r.Price != nil {
			if field, problem := r.Price.Jobs().Problem(); field != "" {
				e.add(path+".price."+field, "%s", problem)
			}
		}
		for j, f := range r.Fallbacks {
			if k, ok := backends[f.Backend]; !ok {
				e.add(fmt.Sprintf("%s.fallbacks[%d].backend", path, j), "no backend named %q (%s)", f.Backend, names(backends))
			} else if c.Backends[k].Type == TypeAnthropic && r.Operation != "chat" && r.Operation != "" {
				e.add(fmt.Sprintf("%s.fallbacks[%d].backend", path, j), "backend %q is of type %s, which serves chat only, not %s", f.Backend, TypeAnthropic, r.Operation)
			}
		}
	}
}

// SlogLevel returns the log level.
func (l Log) SlogLevel() (slog.Level, error) {
	switch strings.ToLower(l.Level) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error, got %q", l.Level)
}

// simConfig returns the sim provider's config for b, defaults resolved.
func (b *Backend) simConfig() *sim.Config {
	s := b.Sim
	if s == nil {
		s = &Sim{}
	}
	c := &sim.Config{
		BaseLatency:        DefaultSimBaseLatency,
		PerToken:           DefaultSimPerToken,
		TimeToFirstToken:   DefaultSimTimeToFirstToken,
		TokensPerSecond:    DefaultSimTokensPerSecond,
		MaxConcurrency:     s.MaxConcurrency,
		RPM:                s.RPM,
		TPM:                s.TPM,
		RPMBurst:           s.RPMBurst,
		TPMBurst:           s.TPMBurst,
		MaxBatchSize:       s.MaxBatchSize,
		FanOut:             s.Native != nil && !*s.Native,
		FailureRate:        s.FailureRate,
		PartialFailureRate: s.PartialFailureRate,
		Seed:               s.Seed,
		Dimensions:         s.Dimensions,
	}
	if s.BaseLatency != nil {
		c.BaseLatency = s.BaseLatency.D()
	}
	if s.PerToken != nil {
		c.PerToken = s.PerToken.D()
	}
	if s.TimeToFirstToken != nil {
		c.TimeToFirstToken = s.TimeToFirstToken.D()
	}
	if s.TokensPerSecond != nil {
		c.TokensPerSecond = *s.TokensPerSecond
	}
	if len(s.Models) > 0 {
		c.Models = make(map[string]sim.Model, len(s.Models))
		for name, m := range s.Models {
			c.Models[name] = sim.Model{Dimensions: m.Dimensions}
		}
	}
	return c
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func names(m map[string]int) string {
	if len(m) == 0 {
		return "none defined"
	}
	ns := make([]string, 0, len(m))
	for n := range m {
		ns = append(ns, strconv.Quote(n))
	}
	sort.Strings(ns)
	return "defined: " + strings.Join(ns, ", ")
}
