package batcher

import (
	"context"
	"sync"
	"testing"
	"time"
)

// slotHolder is a sink that pools its request and its Call
// (CallHolder): it is one stream item of a server, cut down.
type slotHolder struct {
	req      Request
	call     Call
	res      Result
	progress bool
	ended    chan bool     // EventDone's Released
	freed    chan struct{} // CallReleased
}

func newSlotHolder(progress bool) *slotHolder {
	return &slotHolder{progress: progress, ended: make(chan bool, 1), freed: make(chan struct{}, 2)}
}

func (h *slotHolder) OnEvent(ev *Event) {
	if ev.Kind == EventDone {
		h.ended <- ev.Released
	}
}
func (h *slotHolder) WantsProgress() bool { return h.progress }
func (h *slotHolder) ResultSlot() *Result { return &h.res }
func (h *slotHolder) CallSlot() *Call     { return &h.call }
func (h *slotHolder) CallReleased()       { h.freed <- struct{}{} }

// TestCallSlotReusedOnRelease submits request after request, each in
// the Call of the one before as soon as the core calls CallReleased,
// from many goroutines, some sinks taking progress events (whose lock
// the core lets go last), with batches and deadlines mixed. Any touch of
// a Call by the core after CallReleased races with the next request
// writing it (run with -race: moving the release before the call's done
// signal or its events' unlock fails here). A request that ended without
// Released must get no CallReleased, and one with it exactly one.
func TestCallSlotReusedOnRelease(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 4, BatchConfig{MaxBatchSize: 8, MinBatchSize: 1, Window: 100 * time.Microsecond})
	const workers, perWorker = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			h := newSlotHolder(w%2 == 0)
			released := 0
			for i := range perWorker {
				h.req = Request{ID: "r", Route: "m", Input: Input{Op: OpCompletion, Prompt: "p"}, Sink: h}
				if i%7 == 3 {
					h.req.Timeout = time.Microsecond // some end by their deadline, unreleased
				}
				c, err := b.Submit(context.Background(), &h.req)
				if err != nil {
					t.Error(err)
					return
				}
				if c != &h.call {
					t.Error("Submit did not build the call in the sink's slot")
					return
				}
				if !<-h.ended {
					// Not released: the core may still read the call and
					// the request; nothing may say otherwise.
					select {
					case <-h.freed:
						t.Error("CallReleased after an EventDone that did not release the request")
					default:
					}
					h = newSlotHolder(w%2 == 0)
					continue
				}
				<-h.freed
				if len(h.freed) != 0 {
					t.Error("CallReleased twice")
					return
				}
				released++
			}
			if released == 0 {
				t.Error("no request was released: the test reused nothing")
			}
		})
	}
	wg.Wait()
}
