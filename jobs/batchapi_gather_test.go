package jobs_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// pollGate holds every look at a batch (GET /v1/batches/{id}) until want
// batches have been created, so that the first round's batches end
// together however long the machine takes to upload and create them one
// after another. (Under load their creates spread over more than the
// gather, and their failed lines came back in two gathers: a third batch
// for the lines sent again, with nothing wrong.)
type pollGate struct {
	want    int64
	creates atomic.Int64
	open    chan struct{}
	once    sync.Once
}

func newPollGate(want int64) *pollGate {
	return &pollGate{want: want, open: make(chan struct{})}
}

func (g *pollGate) release() { g.once.Do(func() { close(g.open) }) }

func (g *pollGate) wrap(sim http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/batches/") {
			select {
			case <-g.open:
			case <-r.Context().Done():
				http.Error(w, "gone", http.StatusServiceUnavailable)
				return
			}
		}
		sim.ServeHTTP(w, r)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/batches" && g.creates.Add(1) == g.want {
			g.release()
		}
	})
}

// TestBatchAPIGather: with batch_api.gather, the lines that several
// upstream batches failed go upstream again together, in one batch a
// round, instead of one small batch for each batch they came from.
func TestBatchAPIGather(t *testing.T) {
	for _, gather := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("gather=%v", gather), func(t *testing.T) {
			gate := newPollGate(5) // the first round's five batches
			e := newBatchEnvWrapped(t, openSQLite, llmsim.Config{BatchTime: 50 * time.Millisecond, BatchFailRate: 0.1, Seed: 5}, gate.wrap)
			t.Cleanup(gate.release) // before the server's close, after a failure too: no call stays held
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
