package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// TestJobTailWaitsTheWindowNotMaxWait: on a route whose batches wait for
// a second request (min_batch_size 2) up to max_wait (an hour here), a
// job's last partial batch, once every item of the job is submitted, waits
// for other callers no longer than the route's normal window: a one-item
// job (DEFERRABLE or LOW, both delayed an hour here) ends well within it.
func TestJobTailWaitsTheWindowNotMaxWait(t *testing.T) {
	for _, prio := range []batcher.Priority{batcher.PriorityDeferrable, batcher.PriorityLow} {
		t.Run(prio.String(), func(t *testing.T) {
			p, err := sim.New(sim.Config{BaseLatency: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			core, err := batcher.New(
				batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 4}),
				batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
					Batch: batcher.BatchConfig{MaxBatchSize: 10, MinBatchSize: 2, Window: 20 * time.Millisecond, MaxWait: time.Hour,
						Delays: &[5]time.Duration{batcher.PriorityNormal: 20 * time.Millisecond, batcher.PriorityLow: time.Hour, batcher.PriorityDeferrable: time.Hour}}}),
			)
			if err != nil {
				t.Fatal(err)
			}
			m := envOn(t, core).m
			c, err := m.Begin(t.Context(), jobs.Spec{Model: "chat", Priority: prio})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Add(t.Context(), "only", chatItem("alone")); err != nil {
				t.Fatal(err)
			}
			j, err := c.Finish(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Far past the 20 ms window on a loaded machine, far short of the
			// hour the request's priority alone would let it wait.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var last jobs.Progress
			err = m.Watch(ctx, j.ID, 10*time.Millisecond, func(p jobs.Progress) error { last = p; return nil })
			if err != nil || last.State != jobs.StateCompleted || last.Counts.Succeeded != 1 {
				t.Fatalf("Watch: %v; the one-item job is %s %+v, want COMPLETED with its item succeeded", err, last.State, last.Counts)
			}
		})
	}
}
