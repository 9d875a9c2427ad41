package batchapi_test

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
)

// TestETAWholeSecondStart: a provider that stamps in_progress_at in whole
// seconds (OpenAI's Unix seconds, llmsim) truncates the start, so the
// elapsed time ETA divides by is at least the true one: the estimate of a
// batch progressing at a steady rate is never before its true end, and
// late by at most the second's share (left/done seconds). Counts are
// floored as a provider reports whole lines.
func TestETAWholeSecondStart(t *testing.T) {
	base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	for _, total := range []int64{1, 7, 250, 1000} {
		for _, run := range []time.Duration{2 * time.Second, 10 * time.Second, time.Hour} {
			for frac := range 10 { // where in its second the batch began
				start := base.Add(time.Duration(frac) * 100 * time.Millisecond)
				end := start.Add(run)
				for step := 1; step < 20; step++ {
					now := start.Add(run * time.Duration(step) / 20)
					done := total * int64(now.Sub(start)) / int64(run)
					b := batchapi.Batch{Status: batchapi.StatusInProgress, Counts: batchapi.Counts{Total: total, Completed: done},
						InProgressAt: start.Truncate(time.Second)}
					eta := b.ETA(now)
					if done == 0 {
						if !eta.IsZero() {
							t.Fatalf("total %d, nothing done: ETA %v, want unknown", total, eta)
						}
						continue
					}
					if eta.Before(end) {
						t.Fatalf("total %d run %v began %v into its second, at %v done %d: ETA %v is %v early", total, run,
							start.Sub(base), now.Sub(start), done, eta.Sub(now), end.Sub(eta))
					}
					// Late by the start's truncation, and by the floored count: at
					// most a second of elapsed time and one line.
					el := now.Sub(start)
					bound := now.Add(time.Duration(float64(el+time.Second) * float64(total-done+1) / float64(done)))
					if eta.After(bound.Add(time.Millisecond)) {
						t.Fatalf("total %d run %v at %v done %d: ETA %v, later than the bound %v", total, run, el, done, eta.Sub(now), bound.Sub(now))
					}
				}
			}
		}
	}
}
