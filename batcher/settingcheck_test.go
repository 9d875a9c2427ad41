package batcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// TestSettingErrors: every bad setting the validators and New report is a
// *batcher.SettingError carrying its owner, its path in snake_case and the
// reason, and reads as the core's messages always have.
func TestSettingErrors(t *testing.T) {
	nop := batcher.BackendFunc(func(context.Context, *batcher.Batch, []batcher.Response) error { return nil })
	route := func(edit func(*batcher.Route)) batcher.Route {
		r := batcher.Route{Name: "m", Op: batcher.OpChat, Backend: "be"}
		edit(&r)
		return r
	}
	backend := func(edit func(*batcher.BackendConfig)) batcher.BackendConfig {
		b := batcher.BackendConfig{Name: "be", Backend: nop}
		edit(&b)
		return b
	}
	tests := []struct {
		name  string
		err   error
		want  batcher.SettingError
		reads string
	}{
		{"option", batcher.ValidateOptions(batcher.WithQueueCapacity(0)),
			batcher.SettingError{Path: "queue_capacity", Reason: "must be at least 1, got 0"},
			"queue capacity: must be at least 1, got 0"},
		{"route field", batcher.ValidateRoute(route(func(r *batcher.Route) { r.Batch.MaxBatchSize = -1 })),
			batcher.SettingError{Owner: `route "m"`, Path: "max_batch_size", Reason: "must be at least 1, got -1"},
			`route "m" max batch size: must be at least 1, got -1`},
		{"route name", batcher.ValidateRoute(batcher.Route{Op: batcher.OpChat}),
			batcher.SettingError{Owner: "route", Path: "name", Reason: "must not be empty"},
			"route name: must not be empty"},
		{"route cache", batcher.ValidateRoute(route(func(r *batcher.Route) { r.Cache.TTL = -time.Second })),
			batcher.SettingError{Owner: `route "m"`, Path: "cache.ttl", Reason: "must be 0 to 720h0m0s, got -1s"},
			`route "m" cache: ttl: must be 0 to 720h0m0s, got -1s`},
		{"priority delay", batcher.ValidateRoute(route(func(r *batcher.Route) { r.Batch.Delays = &[5]time.Duration{batcher.PriorityLow: -1} })),
			batcher.SettingError{Owner: `route "m"`, Path: "low_delay", Reason: "must not be negative, got -1ns"},
			`route "m" low delay: must not be negative, got -1ns`},
		{"fallbacks", batcher.ValidateRoute(route(func(r *batcher.Route) { r.Fallbacks = make([]batcher.Target, batcher.MaxFallbacks+1) })),
			batcher.SettingError{Owner: `route "m"`, Path: "fallbacks", Reason: "must hold at most 254, got 255"},
			`route "m" fallbacks: must hold at most 254, got 255`},
		{"backend retry", batcher.ValidateBackend(backend(func(b *batcher.BackendConfig) { b.Retry.BudgetWindow = 500 * time.Millisecond })),
			batcher.SettingError{Owner: `backend "be"`, Path: "retry.budget_window", Reason: "must be at least 1s, got 500ms"},
			`backend "be" retry: budget window: must be at least 1s, got 500ms`},
		{"backend breaker", batcher.ValidateBackend(backend(func(b *batcher.BackendConfig) { b.Breaker.Probes = -1 })),
			batcher.SettingError{Owner: `backend "be"`, Path: "breaker.probes", Reason: "must be at least 1, got -1"},
			`backend "be" breaker: probes: must be at least 1, got -1`},
		{"unknown fallback backend", newErr(batcher.WithBackend(backend(func(*batcher.BackendConfig) {})),
			batcher.WithRoute(route(func(r *batcher.Route) { r.Fallbacks = []batcher.Target{{Backend: "nope"}} }))),
			batcher.SettingError{Owner: `route "m"`, Path: "fallbacks[0]", Reason: `no backend named "nope"`},
			`route "m" fallbacks[0]: no backend named "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var se *batcher.SettingError
			if !errors.As(tt.err, &se) {
				t.Fatalf("error %v (%T) holds no *SettingError", tt.err, tt.err)
			}
			if *se != tt.want {
				t.Errorf("SettingError = %+v, want %+v", *se, tt.want)
			}
			if got := se.Error(); got != tt.reads {
				t.Errorf("Error() = %q, want %q", got, tt.reads)
			}
		})
	}
}

func newErr(opts ...batcher.Option) error {
	b, err := batcher.New(opts...)
	if err == nil {
		_ = b.Shutdown(context.Background())
	}
	return err
}
