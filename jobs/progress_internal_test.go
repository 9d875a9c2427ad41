package jobs

import (
	"testing"
	"time"
)

// TestProgressFirstSampleHasARate: the window needs two samples half a
// second apart, and a job's first look (batcherctl jobs get, the first
// line of jobs watch) has one. A job that has run for a while and ended
// items has a known rate all the same: its average since it started.
func TestProgressFirstSampleHasARate(t *testing.T) {
	now := time.Now()
	j := &Job{ID: "j", State: StateRunning, StartedAt: now.Add(-10 * time.Second), TokensIn: 300, TokensOut: 200,
		Counts: Counts{Total: 100, Pending: 40, Running: 10, Succeeded: 45, Failed: 5}}
	p := progressOf(j, &rateTracker{window: DefaultRateWindow}, now)
	if p.ItemsPerH != 5*3600 || p.TokensPerS != 50 || p.ETA != 10*time.Second {
		t.Errorf("first sample: %v items/h, %v tokens/s, ETA %v; want 18000 (50 ended in 10s), 50, 10s", p.ItemsPerH, p.TokensPerS, p.ETA)
	}

	// Nothing ended yet, or not yet started: no rate to tell.
	for name, j := range map[string]*Job{
		"none ended":  {ID: "j", State: StateRunning, StartedAt: now.Add(-10 * time.Second), Counts: Counts{Total: 100, Pending: 100}},
		"not started": {ID: "j", State: StateQueued, Counts: Counts{Total: 100, Pending: 100}},
	} {
		if p := progressOf(j, &rateTracker{window: DefaultRateWindow}, now); p.ETA >= 0 || p.ItemsPerH != 0 {
			t.Errorf("%s: ETA %v, %v items/h; want unknown, 0", name, p.ETA, p.ItemsPerH)
		}
	}
}

// TestProgressWhileCancelling: a job cancelling has no ETA (what is left
// ends at the cancel, not at the rate), and its rate counts the items that
// ran, not those the cancel ended in bulk. Both once read as a job still
// running: an ETA of hours at first, then thousands of items a second.
func TestProgressWhileCancelling(t *testing.T) {
	now := time.Now()
	j := &Job{ID: "j", State: StateCancelling, StartedAt: now.Add(-10 * time.Second), TokensIn: 30, TokensOut: 70,
		Counts: Counts{Total: 20000, Pending: 5990, Running: 2, Succeeded: 8, Cancelled: 14000}}
	p := progressOf(j, &rateTracker{window: DefaultRateWindow}, now)
	if p.ETA >= 0 {
		t.Errorf("cancelling: ETA %v, want unknown", p.ETA)
	}
	if p.ItemsPerH != 8*360 || p.TokensPerS != 10 {
		t.Errorf("cancelling: %v items/h, %v tokens/s; want 2880 (8 ran in 10s), 10", p.ItemsPerH, p.TokensPerS)
	}
}

// TestProgressAllEndedHasNoWait: a job whose items have all ended
// (finalizing) has an ETA of 0, also when no item ended within the rate's
// window (rate 0); jobs watch once showed "finalizing 20/20 done ... eta
// unknown".
func TestProgressAllEndedHasNoWait(t *testing.T) {
	now := time.Now()
	j := &Job{ID: "j", State: StateFinalizing, StartedAt: now.Add(-3 * time.Second), TokensIn: 40, TokensOut: 160,
		Counts: Counts{Total: 20, Succeeded: 20}}
	tr := &rateTracker{window: DefaultRateWindow}
	tr.observe(now.Add(-2*time.Second), 20, 200)
	if p := progressOf(j, tr, now); p.ETA != 0 {
		t.Errorf("finalizing, every item ended: ETA %v, want 0", p.ETA)
	}
	if p := progressOf(j, nil, now); p.ETA != 0 {
		t.Errorf("finalizing without a tracker: ETA %v, want 0", p.ETA)
	}
}
