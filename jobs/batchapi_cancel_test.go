package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// TestBatchAPICancel: a job's cancel reaches its upstream batch, and what
// the provider answered before it still counts: every custom id exactly
// once, the answered lines as results, the rest cancelled.
func TestBatchAPICancel(t *testing.T) {
	for _, st := range batchStores {
		t.Run(st.name, func(t *testing.T) {
			e := newBatchEnv(t, st.open, llmsim.Config{BatchTime: 3 * time.Second, Seed: 11})
			e.pg = st.pg
			m, _ := e.manager(t, nil)
			const n = 200
			j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)

			// Wait until the provider reports progress on the running batch
			// (its ETA is known only once some of its lines are done).
			errRunning := errors.New("running")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err := m.Watch(ctx, j.ID, 10*time.Millisecond, func(p jobs.Progress) error {
				if p.Upstream != nil && p.Upstream.Items > 0 && p.Upstream.ETA >= 0 {
					return errRunning
				}
				if p.State.Terminal() {
					t.Fatalf("job ended %s before its upstream batch ran", p.State)
				}
				return nil
			})
			if !errors.Is(err, errRunning) {
				t.Fatalf("Watch: %v, want the upstream batch running", err)
			}
			if _, err := m.Cancel(t.Context(), j.ID); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			p := waitJob(t, m, j.ID)
			if p.State != jobs.StateCancelled {
				t.Fatalf("ended %s, want cancelled", p.State)
			}
			// Two upstream batches at most (100 requests each): each created
			// is cancelled, and none is created after the cancel.
			if bs := e.sim.BatchStats(); bs.BatchesCreated == 0 || bs.Cancelled != bs.BatchesCreated {
				t.Errorf("llmsim saw %d batches created and %d cancelled, want every one created cancelled", bs.BatchesCreated, bs.Cancelled)
			}
			errs := exactlyOnce(t, m, j, n)
			answered := n - errs
			if answered == 0 || errs == 0 {
				t.Errorf("%d answered and %d not; want the lines done before the cancel answered and the rest not", answered, errs)
			}
			if p.Counts.Succeeded != int64(answered) {
				t.Errorf("Succeeded = %d, want the %d answered lines", p.Counts.Succeeded, answered)
			}
			if online := e.sim.Stats().Chat - e.sim.BatchStats().Answered; online != 0 {
				t.Errorf("%d online calls after the cancel, want 0", online)
			}
		})
	}
}
