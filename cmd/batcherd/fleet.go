package main

import (
	"context"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/fleet"
	"github.com/batcherhq/batcher/telemetry"
)

// openFleet opens the fleet that shares the budgets through Redis, or
// returns nil when no Redis URL is set: batcherd then runs alone. Nothing
// is sent to Redis until Start; Redis unreachable is not an error (the
// replica serves on its local share until it answers).
func openFleet(cfg config.Fleet, mp metric.MeterProvider, log *slog.Logger) (*fleet.Fleet, error) {
	if cfg.RedisURL == "" {
		return nil, nil
	}
	fleet.RedisLogsTo(log)
	opts := append(cfg.Options(), fleet.WithLogger(log), fleet.WithMeterProvider(mp))
	return fleet.Open(cfg.RedisURL, opts...)
}

// closeFleet leaves the fleet, after the core has drained.
func closeFleet(f *fleet.Fleet, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.Close(ctx); err != nil {
		log.Warn("leaving the fleet", "err", err)
	}
}

// fleetSource turns the fleet's status into the live views' figures.
func fleetSource(f *fleet.Fleet) func() *telemetry.Fleet {
	return func() *telemetry.Fleet {
		st := f.Status()
		out := &telemetry.Fleet{Self: st.Self, Redis: st.Redis}
		for _, m := range st.Members {
			out.Replicas = append(out.Replicas, telemetry.Replica{ID: m.ID, Self: m.Self, Info: m.Info})
		}
		for _, b := range st.Backends {
			out.Budgets = append(out.Budgets, telemetry.FleetBudget{
				Backend: b.Name, Factor: b.Factor, PausedUntil: b.PausedUntil, OpenUntil: b.OpenUntil,
				RPMLeft: finite(b.RPMLeft), TPMLeft: finite(b.TPMLeft), RPMUsed: b.RPMUsed, TPMUsed: b.TPMUsed,
				Leases: b.Leases,
			})
		}
		return out
	}
}

func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}
