package jobs_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// heldCreate holds chunk 0's first create call (POST /v1/batches) inside
// the test's handler in front of llmsim until released; the provider then
// finishes it although its client has gone, as a provider may after a
// kill.
type heldCreate struct {
	sim     http.Handler
	held    chan struct{} // closed when the create is held
	release chan struct{}
	landed  chan struct{} // closed when the held create made its batch
	armed   atomic.Bool
	stopped atomic.Bool // the first manager has stopped
	// late: release the held create on the restarted manager's create of
	// chunk 0 (a twin), not on its first look for the batch.
	late bool
	once sync.Once
	// twin is the id of the first batch made for chunk 0: the held
	// create's, since the restarted manager's create of chunk 0 is served
	// only once the held one landed. With late, llmsim holds it in
	// progress (hold) until the manager cancels it, so that the manager's
	// look for twins finds it running however late that look comes.
	twin     atomic.Pointer[string]
	holdTwin chan struct{}
}

// hold is llmsim's Config.HoldBatch.
func (h *heldCreate) hold(id string, meta map[string]string, _ int) <-chan struct{} {
	if !h.late || meta["batcher_chunk"] != "0" {
		return nil
	}
	h.twin.CompareAndSwap(nil, &id)
	if *h.twin.Load() == id {
		return h.holdTwin
	}
	return nil
}

func (h *heldCreate) wrap(sim http.Handler) http.Handler {
	h.sim = sim
	return h
}

func (h *heldCreate) free() { h.once.Do(func() { close(h.release) }) }

func (h *heldCreate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/batches" {
		h.sim.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodGet {
		h.sim.ServeHTTP(w, r) // the look sees no batch yet
		if h.stopped.Load() && !h.late {
			h.free()
		}
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	chunk0 := strings.Contains(string(body), `"batcher_chunk":"0"`)
	if chunk0 && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
		r2 := r.Clone(context.WithoutCancel(r.Context()))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		h.sim.ServeHTTP(httptest.NewRecorder(), r2)
		close(h.landed)
		return
	}
	if chunk0 && h.stopped.Load() && h.late {
		h.free()
		<-h.landed
	}
	h.sim.ServeHTTP(w, r)
}

// TestBatchAPICreateInFlight: the first manager stops while its create
// call of chunk 0 is held in flight (the provider finishes it later).
//   - waits: the restarted manager finds no batch of chunk 0's (that look
//     releases the held call), keeps looking while the old call may still
//     be in flight (CreateTimeout after its recorded start: an hour here),
//     takes the batch the old call made once it lands and creates none:
//     no batch created twice.
//   - twin: with a bound too short for the provider, the restarted
//     manager creates chunk 0's batch again before the old one lands; it
//     cancels the twin (which llmsim holds in progress until then) and
//     never reads its output.
//
// Either way every custom id is on exactly one line. Nothing waits for a
// time: the held call lands on the manager's own request, batches end at
// their first look, and the twin runs until the manager cancels it.
func TestBatchAPICreateInFlight(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "waits"
		if late {
			name = "twin"
		}
		t.Run(name, func(t *testing.T) {
			h := &heldCreate{held: make(chan struct{}), release: make(chan struct{}), landed: make(chan struct{}),
				late: late, holdTwin: make(chan struct{})}
			h.armed.Store(true)
			e := newBatchEnvWrapped(t, openSQLite, llmsim.Config{Seed: 9, HoldBatch: h.hold}, h.wrap)
			t.Cleanup(h.free)
			e.route = func(br *jobs.BatchRoute) { br.CreateTimeout = time.Minute } // the held call stays in flight
			m, stop := e.manager(t, nil)
			const n = 300
			j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
			select {
			case <-h.held:
			case <-time.After(time.Minute):
				t.Fatal("the dispatch never created chunk 0's batch")
			}
			stop()
			h.stopped.Store(true)
			bound := time.Hour // from the held call's start: never reached
			if late {
				bound = time.Millisecond
			}
			e.route = func(br *jobs.BatchRoute) { br.CreateTimeout = bound }
			m2, _ := e.manager(t, nil)
			p := waitJob(t, m2, j.ID)
			if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
				t.Fatalf("ended %s %+v", p.State, p.Counts)
			}
			exactlyOnce(t, m2, j, n)
			st := e.sim.BatchStats()
			if !late {
				if _, batches := e.noneTwice(t); batches != 3 {
					t.Errorf("%d batches upstream, want 3", batches)
				}
				return
			}
			if st.BatchesCreated != 4 || st.Cancelled != 1 {
				t.Errorf("%d batches created and %d cancelled, want 4 (one twin) and 1 (the twin)", st.BatchesCreated, st.Cancelled)
			}
		})
	}
}
