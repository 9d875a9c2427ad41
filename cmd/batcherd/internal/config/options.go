package config

import (
	"fmt"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/server"
)

// Built is what a validated Config turns into: the core's options, with
// the backends it built, and the server's options.
type Built struct {
	Core   []batcher.Option
	Server []server.Option
	// Sims holds the simulated providers by backend name, for their Stats.
	Sims map[string]*sim.Provider
}

// Build validates c and turns it into options for batcher.New and
// server.New. It adds neither a tracer provider nor a logger: those are the
// caller's.
func (c *Config) Build() (*Built, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := &Built{
		Core: []batcher.Option{
			batcher.WithQueueCapacity(c.QueueCapacity),
			batcher.WithQueueTimeout(c.QueueTimeout.D()),
			batcher.WithAgingStep(c.AgingStep.D()),
			batcher.WithIdleLaneTimeout(c.IdleLaneTimeout.D()),
		},
		Server: []server.Option{
			server.WithStreamWindow(c.StreamWindow),
			server.WithSummaryInterval(c.SummaryInterval.D()),
		},
		Sims: map[string]*sim.Provider{},
	}
	for i := range c.Backends {
		be := &c.Backends[i]
		var impl batcher.Backend
		switch be.Type {
		case TypeSim:
			p, err := sim.New(*be.simConfig())
			if err != nil {
				return nil, fmt.Errorf("backends[%d].sim: %w", i, err)
			}
			b.Sims[be.Name] = p
			impl = p
		default:
			return nil, fmt.Errorf("backends[%d].type: unknown type %q", i, be.Type)
		}
		b.Core = append(b.Core, batcher.WithBackend(batcher.BackendConfig{
			Name:           be.Name,
			Backend:        impl,
			MaxConcurrency: be.MaxConcurrency,
			MinConcurrency: be.MinConcurrency,
			RPM:            be.RPM,
			TPM:            be.TPM,
			ProtectedShare: be.ProtectedShare,
			AttemptTimeout: be.AttemptTimeout.D(),
			Retry: batcher.RetryPolicy{
				MaxRetries:     be.Retry.MaxRetries,
				InitialBackoff: be.Retry.InitialBackoff.D(),
				Factor:         be.Retry.Factor,
				MaxBackoff:     be.Retry.MaxBackoff.D(),
				BudgetRatio:    be.Retry.BudgetRatio,
				BudgetWindow:   be.Retry.BudgetWindow.D(),
				BudgetMin:      be.Retry.BudgetMin,
			},
			Breaker: batcher.BreakerConfig{
				Consecutive: be.Breaker.Consecutive,
				Ratio:       be.Breaker.Ratio,
				Window:      be.Breaker.Window.D(),
				MinCalls:    be.Breaker.MinCalls,
				Cooldown:    be.Breaker.Cooldown.D(),
				Probes:      be.Breaker.Probes,
			},
		}))
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		var fallbacks []batcher.Target
		for _, f := range r.Fallbacks {
			fallbacks = append(fallbacks, batcher.Target{Backend: f.Backend, Model: f.Model})
		}
		b.Core = append(b.Core, batcher.WithRoute(batcher.Route{
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
		}))
	}
	return b, nil
}
