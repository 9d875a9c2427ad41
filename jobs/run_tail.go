package jobs

import (
	"context"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// A job's requests go to the core at its priority, LOW or DEFERRABLE,
// whose delay (up to the route's max_wait) lets a partial batch wait for
// more of the job's own requests. Once the store holds none of the job's
// tasks left to claim and the backlog is empty, nothing more of the job's
// is coming: the requests still queued are its last partial batches, and
// they wait for other callers' requests no longer than the route's normal
// window (batcher.RouteInfo.Window), then go (FlushCalls). A one-item job
// so ends within the window, not max_wait.

// tail is the run's state of that wait; the loop owns it.
type tail struct {
	timer *time.Timer
	c     <-chan time.Time // fires when the wait is over (nil: none armed)
	done  bool             // flushed since the last submit: nothing new queued
}

// noWait is a context that is already done: FlushCalls asks for the
// flush and returns without waiting for the calls to leave.
var noWait = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// armTail arms the tail's wait when the job's requests in flight are its
// last: the run claims no more (its supply is dry), holds no backlog, and
// has flushed none of them since its last submit.
func (r *run) armTail() {
	t := &r.tail
	if t.c != nil || t.done || r.phase != phaseRunning || r.supply == supplyUnknown || len(r.backlog) > 0 || len(r.calls) == 0 {
		return
	}
	var wait time.Duration
	for _, f := range r.calls {
		if ri, ok := r.m.routeInfo(f.model); ok {
			wait = max(wait, ri.Window)
		}
	}
	if t.timer == nil {
		t.timer = time.NewTimer(wait)
	} else {
		t.timer.Reset(wait) // Go 1.23 timers: no stale tick survives a Reset
	}
	t.c = t.timer.C
}

// flushTail sends the job's requests still queued in the core.
func (r *run) flushTail() {
	r.tail.c, r.tail.done = nil, true
	calls := make([]*batcher.Call, 0, len(r.calls))
	for _, f := range r.calls {
		calls = append(calls, f.call)
	}
	_ = r.m.cfg.Core.FlushCalls(noWait, calls...)
}

// submitted says a request went to the core: a later tail waits again.
func (r *run) submitted() { r.tail.done = false }

func (t *tail) stop() {
	if t.timer != nil {
		t.timer.Stop()
	}
}
