package config

import (
	"errors"
	"fmt"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/server"
)

// The settings batcherd hands to the core and the server are validated by
// those components themselves (batcher.ValidateBackend, ValidateRoute,
// ValidateOptions; server.ValidateOptions), once, when the file is loaded:
// batcherd keeps no copy of their rules. It only puts the setting each
// *batcher.SettingError names ("retry.budget_window") under its YAML path
// ("backends[0].retry.budget_window").

// coreOptions are the batcher-wide options.
func (c *Config) coreOptions() []batcher.Option {
	return []batcher.Option{
		batcher.WithQueueCapacity(c.QueueCapacity),
		batcher.WithQueueTimeout(c.QueueTimeout.D()),
		batcher.WithAgingStep(c.AgingStep.D()),
		batcher.WithIdleLaneTimeout(c.IdleLaneTimeout.D()),
		batcher.WithMaxLanes(c.MaxLanes),
	}
}

// serverOptions are the server's options from the file.
func (c *Config) serverOptions() []server.Option {
	return append([]server.Option{
		server.WithStreamWindow(c.StreamWindow),
		server.WithSummaryInterval(c.SummaryInterval.D()),
	}, c.streamLimitOptions()...)
}

// coreConfig is b as the core takes it, with impl as its implementation.
func (b *Backend) coreConfig(impl batcher.Backend) batcher.BackendConfig {
	return batcher.BackendConfig{
		Name:              b.Name,
		Backend:           impl,
		MaxConcurrency:    b.MaxConcurrency,
		MinConcurrency:    b.MinConcurrency,
		RPM:               b.RPM,
		TPM:               b.TPM,
		RPMBurst:          b.RPMBurst,
		TPMBurst:          b.TPMBurst,
		ProtectedShare:    b.ProtectedShare,
		AttemptTimeout:    b.AttemptTimeout.D(),
		StreamIdleTimeout: b.StreamIdleTimeout.D(),
		Retry: batcher.RetryPolicy{
			MaxRetries:     b.Retry.MaxRetries,
			InitialBackoff: b.Retry.InitialBackoff.D(),
			Factor:         b.Retry.Factor,
			MaxBackoff:     b.Retry.MaxBackoff.D(),
			BudgetRatio:    b.Retry.BudgetRatio,
			BudgetWindow:   b.Retry.BudgetWindow.D(),
			BudgetMin:      b.Retry.BudgetMin,
		},
		Breaker: batcher.BreakerConfig{
			Consecutive: b.Breaker.Consecutive,
			Ratio:       b.Breaker.Ratio,
			Window:      b.Breaker.Window.D(),
			MinCalls:    b.Breaker.MinCalls,
			Cooldown:    b.Breaker.Cooldown.D(),
			Probes:      b.Breaker.Probes,
		},
	}
}

// coreRoute is r as the core takes it.
func (r *Route) coreRoute() batcher.Route {
	var fallbacks []batcher.Target
	for _, f := range r.Fallbacks {
		fallbacks = append(fallbacks, batcher.Target{Backend: f.Backend, Model: f.Model})
	}
	return batcher.Route{
		Name:      r.Name,
		Op:        operations[r.Operation],
		Backend:   r.Backend,
		Model:     r.Model,
		Fallbacks: fallbacks,
		Batch: batcher.BatchConfig{
			MaxBatchSize:   r.Batching.MaxBatchSize,
			MinBatchSize:   r.Batching.MinBatchSize,
			MaxBatchTokens: r.Batching.MaxBatchTokens,
			Window:         r.Batching.Window.D(),
			MaxWait:        r.Batching.MaxWait.D(),
		},
		MaxInputBytes:    r.MaxInputBytes,
		MaxTokensLimit:   r.MaxTokensLimit,
		DefaultMaxTokens: r.DefaultMaxTokens,
		Cache: batcher.RouteCache{
			Off: r.Cache.Off, TTL: r.Cache.TTL.D(), MaxBytes: r.Cache.MaxBytes,
			SeedReproducible: r.Cache.SeedReproducible, Shared: r.Cache.Shared,
		},
	}
}

// routeBatching lists the core's route fields that YAML puts under
// batching.
var routeBatching = map[string]bool{
	"max_batch_size": true, "min_batch_size": true, "max_batch_tokens": true, "window": true, "max_wait": true,
}

// validateComponents has the core and the server check their settings,
// adding each error under its YAML path.
func (c *Config) validateComponents(e *errs) {
	for _, err := range unjoin(batcher.ValidateOptions(c.coreOptions()...)) {
		e.addSetting("", err, nil)
	}
	for _, err := range unjoin(server.ValidateOptions(c.serverOptions()...)) {
		e.addSetting("", err, nil)
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		if b.Name == "" {
			continue // reported by Validate
		}
		for _, err := range unjoin(batcher.ValidateBackend(b.coreConfig(nil))) {
			e.addSetting(fmt.Sprintf("backends[%d]", i), err, nil)
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if _, ok := operations[r.Operation]; !ok || r.Name == "" || r.Backend == "" {
			continue // reported by Validate
		}
		for _, err := range unjoin(batcher.ValidateRoute(r.coreRoute())) {
			e.addSetting(fmt.Sprintf("routes[%d]", i), err, func(f string) string {
				if routeBatching[f] {
					return "batching." + f
				}
				return f
			})
		}
	}
}

// addSetting adds a component's error under its YAML path: a
// *batcher.SettingError's path (already in snake_case, as YAML spells it)
// goes under prefix, through nest when given, for fields YAML nests
// differently, with its reason. Any other error is added whole under
// prefix.
func (e *errs) addSetting(prefix string, err error, nest func(string) string) {
	if err == nil {
		return
	}
	var se *batcher.SettingError
	if !errors.As(err, &se) {
		if prefix != "" {
			err = &FieldError{Path: prefix, Reason: err.Error(), Err: err}
		}
		*e = append(*e, err)
		return
	}
	field := se.Path
	if nest != nil {
		field = nest(field)
	}
	if prefix != "" {
		field = prefix + "." + field
	}
	*e = append(*e, &FieldError{Path: field, Reason: se.Reason, Err: err})
}
