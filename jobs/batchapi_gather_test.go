package jobs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// TestBatchAPIGather: with batch_api.gather, the lines that several
// upstream batches failed go upstream again together, in one batch a
// round, instead of one small batch for each batch they came from.
func TestBatchAPIGather(t *testing.T) {
	for _, gather := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("gather=%v", gather), func(t *testing.T) {
			e := newBatchEnv(t, openSQLite, llmsim.Config{BatchTime: 50 * time.Millisecond, BatchFailRate: 0.1, Seed: 5})
			e.route = func(br *jobs.BatchRoute) { br.Gather = gather }
			m, _ := e.manager(t, nil)
			const n = 500 // five upstream batches of 100
			j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
			p := waitJob(t, m, j.ID)
			if p.State != jobs.StateCompleted {
				t.Fatalf("ended %s %+v", p.State, p.Counts)
			}
			exactlyOnce(t, m, j, n)
			_, batches := e.noneTwice(t)
			resent := batches - n/100
			// An item goes upstream at most three times: two rounds of
			// resends, one batch each when they are gathered.
			if gather > 0 && resent > 2 {
				t.Errorf("%d upstream batches for the lines sent again, want at most 2 (one a round)", resent)
			}
			if gather == 0 && resent <= 2 {
				t.Errorf("%d upstream batches for the lines sent again without gather; the test needs more to show gather's effect", resent)
			}
			t.Logf("gather %v: %d batches, %d for lines sent again", gather, batches, resent)
		})
	}
}
