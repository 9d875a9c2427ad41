package jobs_test

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

// An ended job's rate counts the items that ran to an outcome, not those a
// cancel ended unprocessed: a job cancelled before any item came back did
// nothing, at 0 items an hour.
func TestCancelledJobRateCountsOnlyItemsThatRan(t *testing.T) {
	e := newEnv(t, nil)
	j := e.create(t, gatedSpec(), 100)
	ctx := t.Context()
	for e.gate.calls.Load() == 0 { // tasks in flight at the gate, which stays shut
		select {
		case <-ctx.Done():
			t.Fatal("no call reached the backend")
		case <-time.After(time.Millisecond):
		}
	}
	if _, err := e.m.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	p, _ := e.wait(t, j.ID)
	if p.State != jobs.StateCancelled || p.Counts.Succeeded+p.Counts.Failed != 0 {
		t.Fatalf("progress %+v, want cancelled with no item run", p)
	}
	if p.ItemsPerH != 0 {
		t.Errorf("items per hour %v for a job that ran no item, want 0", p.ItemsPerH)
	}
}
