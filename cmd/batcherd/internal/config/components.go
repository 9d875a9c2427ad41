package config

import (
	"fmt"
	"strings"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/server"
)

// The settings batcherd hands to the core and the server are validated by
// those components themselves (batcher.ValidateBackend, ValidateRoute,
// ValidateOptions; server.ValidateOptions), once, when the file is loaded:
// batcherd keeps no copy of their rules. It only maps the field each error
// names, in the component's words ("retry: budget window"), to its YAML
// path ("backends[0].retry.budget_window").

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
		e.addField("", "", err, nil)
	}
	for _, err := range unjoin(server.ValidateOptions(c.serverOptions()...)) {
		e.addField("", "", err, nil)
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		if b.Name == "" {
			continue // reported by Validate
		}
		for _, err := range unjoin(batcher.ValidateBackend(b.coreConfig(nil))) {
			e.addField(fmt.Sprintf("backends[%d].", i), fmt.Sprintf("backend %q ", b.Name), err, nil)
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if _, ok := operations[r.Operation]; !ok || r.Name == "" || r.Backend == "" {
			continue // reported by Validate
		}
		for _, err := range unjoin(batcher.ValidateRoute(r.coreRoute())) {
			e.addField(fmt.Sprintf("routes[%d].", i), fmt.Sprintf("route %q ", r.Name), err, func(f string) string {
				if routeBatching[f] {
					return "batching." + f
				}
				return f
			})
		}
	}
}

// addField adds a component's error under its YAML path: the component's
// text, less scope, reads "<field words>[: <field words>]: must ...", and
// the field becomes prefix + "words_joined.by_dots" (through nest, when
// given, for fields YAML nests differently). A text of another shape is
// added whole under prefix.
func (e *errs) addField(prefix, scope string, err error, nest func(string) string) {
	if err == nil {
		return
	}
	msg := strings.TrimPrefix(err.Error(), scope)
	i := strings.Index(msg, ": must")
	if i < 0 {
		*e = append(*e, fmt.Errorf("%s%s", strings.TrimSuffix(prefix, "."), ": "+msg))
		return
	}
	parts := strings.Split(msg[:i], ": ")
	for k, p := range parts {
		parts[k] = strings.ReplaceAll(strings.ToLower(p), " ", "_")
	}
	field := strings.Join(parts, ".")
	if nest != nil {
		field = nest(field)
	}
	*e = append(*e, fmt.Errorf("%s%s%s", prefix, field, msg[i:]))
}
