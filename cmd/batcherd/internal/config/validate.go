package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/server"
)

// The backend types.
const (
	TypeSim    = "sim"
	TypeOpenAI = "openai"
)

// types lists the backend types for messages.
const types = TypeSim + " or " + TypeOpenAI

var operations = map[string]batcher.Operation{
	"chat":       batcher.OpChat,
	"completion": batcher.OpCompletion,
	"embedding":  batcher.OpEmbedding,
}

// errs collects field errors.
type errs []error

func (e *errs) add(path, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Validate reports every bad field of c, each error naming its path.
func (c *Config) Validate() error {
	var e errs
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
	if c.QueueCapacity < 1 {
		e.add("queue_capacity", "must be at least 1, got %d", c.QueueCapacity)
	}
	for _, d := range []struct {
		path string
		v    Duration
	}{
		{"queue_timeout", c.QueueTimeout}, {"drain_timeout", c.DrainTimeout},
		{"aging_step", c.AgingStep}, {"idle_lane_timeout", c.IdleLaneTimeout},
	} {
		if d.v <= 0 {
			e.add(d.path, "must be positive, got %v", d.v)
		}
	}
	if c.StreamWindow < 1 {
		e.add("stream_window", "must be at least 1, got %d", c.StreamWindow)
	}
	if d := c.SummaryInterval.D(); d < server.MinSummaryInterval || d > server.MaxSummaryInterval {
		e.add("summary_interval", "must be %v to %v, got %v", server.MinSummaryInterval, server.MaxSummaryInterval, d)
	}

	backends := map[string]int{}
	for i := range c.Backends {
		b := &c.Backends[i]
		path := fmt.Sprintf("backends[%d]", i)
		switch j, dup := backends[b.Name]; {
		case b.Name == "":
			e.add(path+".name", "must not be empty")
		case dup:
			e.add(path+".name", "%q is already the name of backends[%d]", b.Name, j)
		default:
			backends[b.Name] = i
		}
		b.validateCore(path, &e)
		switch b.Type {
		case TypeSim:
			if err := b.simConfig().Validate(); err != nil {
				for _, err := range unjoin(err) {
					e = append(e, fmt.Errorf("%s.sim.%w", path, err))
				}
			}
		case TypeOpenAI:
			o := b.OpenAI
			if o == nil {
				o = &OpenAI{}
			}
			o.validate(path+".openai", b.Name, c, &e)
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
	}

	if len(c.Routes) == 0 {
		e.add("routes", "at least one route is needed")
	}
	routes := map[string]int{}
	for i := range c.Routes {
		r := &c.Routes[i]
		path := fmt.Sprintf("routes[%d]", i)
		switch j, dup := routes[r.Name]; {
		case r.Name == "":
			e.add(path+".name", "must not be empty")
		case dup:
			e.add(path+".name", "%q is already the name of routes[%d]", r.Name, j)
		default:
			routes[r.Name] = i
		}
		if _, ok := operations[r.Operation]; !ok {
			e.add(path+".operation", "must be chat, completion or embedding, got %q", r.Operation)
		}
		if _, ok := backends[r.Backend]; !ok {
			if r.Backend == "" {
				e.add(path+".backend", "must name a backend (%s)", names(backends))
			} else {
				e.add(path+".backend", "no backend named %q (%s)", r.Backend, names(backends))
			}
		}
		if len(r.Fallbacks) > maxFallbacks {
			e.add(path+".fallbacks", "must hold at most %d, got %d", maxFallbacks, len(r.Fallbacks))
		}
		for j, f := range r.Fallbacks {
			if _, ok := backends[f.Backend]; !ok {
				e.add(fmt.Sprintf("%s.fallbacks[%d].backend", path, j), "no backend named %q (%s)", f.Backend, names(backends))
			}
		}
		r.Batching.validate(path+".batching", &e)
		if r.MaxInputBytes < 0 {
			e.add(path+".max_input_bytes", "must not be negative, got %d", r.MaxInputBytes)
		}
		limit := r.MaxTokensLimit
		if limit == 0 {
			limit = batcher.DefaultMaxTokensLimit
		}
		if r.MaxTokensLimit < 0 {
			e.add(path+".max_tokens_limit", "must not be negative, got %d", r.MaxTokensLimit)
		} else if r.DefaultMaxTokens < 0 || r.DefaultMaxTokens > limit {
			e.add(path+".default_max_tokens", "must be 1 to max_tokens_limit %d, got %d", limit, r.DefaultMaxTokens)
		}
	}
	return errors.Join(e...)
}

// maxFallbacks is the core's bound on a route's fallbacks.
const maxFallbacks = math.MaxUint8 - 1

// validateCore checks the settings the core applies to a backend, as the
// core does, so that errors name their YAML path.
func (b *Backend) validateCore(path string, e *errs) {
	maxConc := b.MaxConcurrency
	if maxConc == 0 {
		maxConc = batcher.DefaultMaxConcurrency
	}
	if b.MaxConcurrency < 0 {
		e.add(path+".max_concurrency", "must not be negative, got %d", b.MaxConcurrency)
	} else if b.MinConcurrency < 0 || b.MinConcurrency > maxConc {
		e.add(path+".min_concurrency", "must be 1 to max_concurrency %d, got %d", maxConc, b.MinConcurrency)
	}
	if b.RPM < 0 {
		e.add(path+".rpm", "must not be negative, got %d", b.RPM)
	}
	if b.TPM < 0 {
		e.add(path+".tpm", "must not be negative, got %d", b.TPM)
	}
	if b.RPMBurst < 0 {
		e.add(path+".rpm_burst", "must not be negative, got %d", b.RPMBurst)
	}
	if b.TPMBurst < 0 {
		e.add(path+".tpm_burst", "must not be negative, got %d", b.TPMBurst)
	}
	if b.ProtectedShare > 0.9 || math.IsNaN(b.ProtectedShare) {
		e.add(path+".protected_share", "must be at most 0.9, got %v", b.ProtectedShare)
	}
	if b.AttemptTimeout < 0 {
		e.add(path+".attempt_timeout", "must be positive, got %v", b.AttemptTimeout)
	}

	r, rp := &b.Retry, path+".retry"
	initial := r.InitialBackoff.D()
	if initial == 0 {
		initial = batcher.DefaultInitialBackoff
	}
	if r.InitialBackoff < 0 {
		e.add(rp+".initial_backoff", "must be positive, got %v", r.InitialBackoff)
	}
	if r.Factor != 0 && !(r.Factor >= 1) {
		e.add(rp+".factor", "must be at least 1, got %v", r.Factor)
	}
	if r.MaxBackoff != 0 && r.MaxBackoff.D() < initial {
		e.add(rp+".max_backoff", "must be at least the initial backoff %v, got %v", initial, r.MaxBackoff)
	}
	if r.BudgetRatio < 0 || r.BudgetRatio > 1 || math.IsNaN(r.BudgetRatio) {
		e.add(rp+".budget_ratio", "must be 0 to 1, got %v", r.BudgetRatio)
	}
	if r.BudgetWindow < 0 {
		e.add(rp+".budget_window", "must be positive, got %v", r.BudgetWindow)
	}
	if r.BudgetMin < 0 {
		e.add(rp+".budget_min", "must not be negative, got %d", r.BudgetMin)
	}

	k, kp := &b.Breaker, path+".breaker"
	if k.Ratio < 0 || k.Ratio > 1 || math.IsNaN(k.Ratio) {
		e.add(kp+".ratio", "must be 0 to 1, got %v", k.Ratio)
	}
	if k.Window != 0 && k.Window.D() < time.Second {
		e.add(kp+".window", "must be at least 1s, got %v", k.Window)
	}
	if k.MinCalls < 0 {
		e.add(kp+".min_calls", "must not be negative, got %d", k.MinCalls)
	}
	if k.Cooldown < 0 {
		e.add(kp+".cooldown", "must be positive, got %v", k.Cooldown)
	}
	if k.Probes < 0 {
		e.add(kp+".probes", "must not be negative, got %d", k.Probes)
	}
}

func (b *Batching) validate(path string, e *errs) {
	maxSize := b.MaxBatchSize
	if maxSize == 0 {
		maxSize = batcher.DefaultMaxBatchSize
	}
	if b.MaxBatchSize < 0 {
		e.add(path+".max_batch_size", "must not be negative, got %d", b.MaxBatchSize)
	} else if b.MinBatchSize < 0 || b.MinBatchSize > maxSize {
		e.add(path+".min_batch_size", "must be 1 to max_batch_size %d, got %d", maxSize, b.MinBatchSize)
	}
	if b.MaxBatchTokens < 0 {
		e.add(path+".max_batch_tokens", "must not be negative, got %d", b.MaxBatchTokens)
	}
	window := b.Window.D()
	if window == 0 {
		window = batcher.DefaultWindow
	}
	if b.Window < 0 {
		e.add(path+".window", "must be positive, got %v", b.Window)
	} else if b.MaxWait < 0 || (b.MaxWait > 0 && b.MaxWait.D() < window) {
		e.add(path+".max_wait", "must be at least the window %v, got %v", window, b.MaxWait)
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
