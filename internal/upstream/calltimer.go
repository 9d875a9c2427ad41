package upstream

import (
	"context"
	"io"
	"math"
	"sync"
	"time"
)

// CallTimers is a pool of CallTimer, one a backend: a timer belongs to the
// goroutines, or synctest bubble, that made it, so backends do not share
// them. The zero value is ready.
type CallTimers struct{ pool sync.Pool }

// CallTimer is a streamed call's one timer: it bounds the wait for the
// response's headers (Start), is stopped when they come (Stop), and then
// bounds the drain after the answer's end (Drain), each time ending the
// call's context with its phase's cause. Before, each phase made a timer
// and a closure of its own; a pooled CallTimer makes none once warm.
//
// Its fields are written only while its timer is stopped before firing
// (or new), so fire, which runs only after an arming, reads them without a
// lock (the runtime orders a timer's Reset before its function). Once a
// Stop finds the timer fired, it is spent: fire may still be running, so
// it is never armed again nor pooled. A CallTimer is one goroutine's.
type CallTimer struct {
	t      *time.Timer
	cancel context.CancelCauseFunc
	cause  error
	armed  bool // t was reset and not stopped since
	spent  bool // t fired: never armed again, nor pooled
	pool   *CallTimers
}

// Start returns a timer that ends the call, cancel(cause), after d, unless
// stopped first.
func (p *CallTimers) Start(cancel context.CancelCauseFunc, d time.Duration, cause error) *CallTimer {
	ct, _ := p.pool.Get().(*CallTimer)
	if ct == nil {
		ct = &CallTimer{pool: p}
		ct.t = time.AfterFunc(math.MaxInt64, ct.fire)
		ct.t.Stop()
	}
	ct.cancel = cancel
	ct.arm(d, cause)
	return ct
}

func (ct *CallTimer) fire() { ct.cancel(ct.cause) }

// arm starts the stopped timer for d with cause; a spent one stays spent
// (its context has ended).
func (ct *CallTimer) arm(d time.Duration, cause error) {
	if ct.spent {
		return
	}
	ct.cause, ct.armed = cause, true
	ct.t.Reset(d)
}

// Stop stops the timer. It reports whether the timer had fired (now or
// in an earlier phase): the call's context was, or is being, cancelled.
func (ct *CallTimer) Stop() bool {
	if ct.armed {
		ct.armed = false
		if !ct.t.Stop() {
			ct.spent = true
		}
	}
	return ct.spent
}

// Release stops the timer and gives it back to its pool unless it fired.
// The caller must not use ct afterwards.
func (ct *CallTimer) Release() {
	if ct.Stop() {
		return // fire may be running: leave ct to the collector
	}
	ct.cancel, ct.cause = nil, nil
	ct.pool.pool.Put(ct)
}

// Drain reads a streamed response's body to its end once the answer is
// whole ([DONE], message_stop). net/http returns a connection to the pool
// only when its body was read to EOF: closed before (the end of a chunked
// response comes just after the last event), the connection is closed and
// the next call dials anew. A response that does not end within 50 ms or
// 4 KiB is cut: ct, stopped, is armed again to end the call with cause,
// and the connection is closed.
func Drain(body io.Reader, ct *CallTimer, cause error) {
	ct.arm(drainWait, cause)
	_, _ = io.CopyN(io.Discard, body, maxDrainBytes)
	ct.Stop()
}
