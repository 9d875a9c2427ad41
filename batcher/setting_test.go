package batcher

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestConfigResolution(t *testing.T) {
	nop := BackendFunc(func(context.Context, *Batch, []Response) error { return nil })
	be := WithBackend(BackendConfig{Name: "be", Backend: nop})
	route := func(edit func(*Route)) Option {
		r := Route{Name: "m", Op: OpChat, Backend: "be"}
		edit(&r)
		return WithRoute(r)
	}
	tests := []struct {
		name string
		opts []Option
		want string // substring of the error; empty: valid
	}{
		{"defaults", []Option{be, route(func(*Route) {})}, ""},
		{"no routes", []Option{be}, "routes: at least one route"},
		{"queue capacity", []Option{be, route(func(*Route) {}), WithQueueCapacity(0)}, "queue capacity: must be at least 1, got 0"},
		{"queue timeout", []Option{be, route(func(*Route) {}), WithQueueTimeout(-1)}, "queue timeout: must be positive"},
		{"aging", []Option{be, route(func(*Route) {}), WithAgingStep(0)}, "aging step: must be positive"},
		{"unknown backend", []Option{be, route(func(r *Route) { r.Backend = "nope" })}, `route "m" backend: no backend named "nope"`},
		{"operation", []Option{be, route(func(r *Route) { r.Op = 0 })}, `route "m" operation`},
		{"max batch", []Option{be, route(func(r *Route) { r.Batch.MaxBatchSize = -1 })}, `route "m" max batch size: must be at least 1, got -1`},
		{"min batch", []Option{be, route(func(r *Route) { r.Batch.MaxBatchSize = 3; r.Batch.MinBatchSize = 4 })}, `min batch size: must be 1 to max batch size 3, got 4`},
		{"window", []Option{be, route(func(r *Route) { r.Batch.Window = -time.Second })}, `window: must be positive, got -1s`},
		{"max wait", []Option{be, route(func(r *Route) { r.Batch.Window = time.Second; r.Batch.MaxWait = time.Millisecond })}, `max wait: must be at least the window 1s`},
		{"delay", []Option{be, route(func(r *Route) { r.Batch.Delays = &[5]time.Duration{PriorityUrgent: -1} })}, `urgent delay: must not be negative`},
		{"tokens", []Option{be, route(func(r *Route) { r.MaxTokensLimit = 10; r.DefaultMaxTokens = 20 })}, `default max tokens: must be 1 to max tokens limit 10, got 20`},
		{"duplicate route", []Option{be, route(func(*Route) {}), route(func(*Route) {})}, `route "m": defined twice`},
		{"backend concurrency", []Option{WithBackend(BackendConfig{Name: "be", Backend: nop, MaxConcurrency: -2}), route(func(*Route) {})}, `backend "be" max concurrency: must be 1 to 10000, got -2`},
		{"backend concurrency too high", []Option{WithBackend(BackendConfig{Name: "be", Backend: nop, MaxConcurrency: 200_000_000}), route(func(*Route) {})}, `backend "be" max concurrency: must be 1 to 10000, got 200000000`},
		{"rpm burst", []Option{WithBackend(BackendConfig{Name: "be", Backend: nop, RPM: 60, RPMBurst: -1}), route(func(*Route) {})}, `backend "be" rpm burst: must be at least 1, got -1`},
		{"backend impl", []Option{WithBackend(BackendConfig{Name: "be"}), route(func(*Route) {})}, `backend "be": no implementation`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.opts...)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = b.Shutdown(context.Background())
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRouteDefaults(t *testing.T) {
	rc, err := resolveRoute(Route{Name: "m", Op: OpChat, Backend: "be"})
	if err != nil {
		t.Fatal(err)
	}
	b := rc.Batch
	if b.MaxBatchSize != DefaultMaxBatchSize || b.MinBatchSize != DefaultMinBatchSize || b.Window != DefaultWindow || b.MaxWait != DefaultMaxWait {
		t.Fatalf("defaults not applied: %+v", b)
	}
	want := [numPriorities]time.Duration{PriorityUrgent: 0, PriorityHigh: 50 * time.Millisecond,
		PriorityNormal: 100 * time.Millisecond, PriorityLow: time.Second, PriorityDeferrable: 5 * time.Second}
	if rc.delays != want {
		t.Fatalf("delays %v, want %v", rc.delays, want)
	}
}
