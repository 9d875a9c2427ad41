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
//   - waits: the restarted manager finds no batch of chunk 0's, waits
//     until the old call can no longer be in flight (CreateTimeout after
//     its recorded start), finds the batch the old call made and creates
//     none: no batch created twice.
//   - twin: with a bound too short for the provider, the restarted
//     manager creates chunk 0's batch again before the old one lands; it
//     cancels the twin and never reads its output.
//
// Either way every custom id is on exactly one line.
func TestBatchAPICreateInFlight(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "waits"
		if late {
			name = "twin"
		}
		t.Run(name, func(t *testing.T) {
			h := &heldCreate{held: make(chan struct{}), release: make(chan struct{}), landed: make(chan struct{}), late: late}
			h.armed.Store(true)
			// Batches run long enough that the twin is still running
			// when the restarted manager records chunk 0's batch and looks
			// for twins: a twin that has ended is not cancelled (it is
			// only left unread). For twin, 5 s: under load the look can
			// come more than 1 s after the twin landed, when it has ended
			// (seen: 4 batches created, 0 cancelled).
			batchTime := time.Second
			if late {
				batchTime = 5 * time.Second
			}
			e := newBatchEnvWrapped(t, openSQLite, llmsim.Config{BatchTime: batchTime, Seed: 9}, h.wrap)
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
			bound := 8 * time.Second // from the held call's start: past the stop and restart
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
