package main

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/openaiapi"
)

// TestBatchStatusTimes: a job's batch status agrees with its timestamps
// as OpenAI's lifecycle has them (validating, in_progress from
// in_progress_at on, finalizing): a job queued behind others, which has
// not begun to run, is validating with no in_progress_at, not in_progress
// without one.
func TestBatchStatusTimes(t *testing.T) {
	start := time.Unix(1_700_000_100, 0)
	for _, tt := range []struct {
		name    string
		state   jobs.State
		started time.Time
		want    string
	}{
		{"validating", jobs.StateValidating, time.Time{}, openaiapi.BatchValidating},
		{"queued, not run", jobs.StateQueued, time.Time{}, openaiapi.BatchValidating},
		{"queued, ran before", jobs.StateQueued, start, openaiapi.BatchInProgress},
		{"running", jobs.StateRunning, start, openaiapi.BatchInProgress},
		{"finalizing", jobs.StateFinalizing, start, openaiapi.BatchFinalizing},
		{"cancelling", jobs.StateCancelling, time.Time{}, openaiapi.BatchCancelling},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := &jobs.Job{ID: "job_x", State: tt.state, CreatedAt: time.Unix(1_700_000_000, 0), StartedAt: tt.started}
			got := batchJobs{}.batch(j)
			if got.Status != tt.want {
				t.Errorf("status %q, want %q", got.Status, tt.want)
			}
			if got.Status == openaiapi.BatchInProgress && got.StartedAt.IsZero() {
				t.Errorf("in_progress with no in_progress_at")
			}
		})
	}
}
