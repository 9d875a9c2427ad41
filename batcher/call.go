package batcher

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Call states.
const (
	callPending uint32 = iota
	callDone
)

// The states of a Submit call's done channel (Call.doneState), which is
// made only when somebody asks for it (Done, Result): a call that ends
// before anyone asks, as a stream's calls do (they report through their
// sink), and a queued call nobody waits on yet, cost no channel. Do's
// calls use Do's pooled channel instead and none of this.
const (
	doneNone        uint32 = iota // not asked for, not ended
	doneMaking                    // a Done is making it
	doneReady                     // made; closed by the finisher on the result
	doneEnded                     // ended before anyone asked: Done returns closedDone
	doneEndedMaking               // ended while a Done made it: that Done closes it
)

// closedDone is the done channel of every call that ended before anybody
// asked for one.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Call is one admitted request on its way to its terminal result.
//
// Ownership: req, admitted, deadline, tokens, span, token and progress are set
// by Submit before the call is visible to any other goroutine and never
// change. lane is the lane it was last queued in (set by push). heapIdx,
// tag, qidx and entry belong to that lane's owner (a message about c
// reaching another lane's owner asks lane.holds first); the timing and attempt
// fields belong to the lane's owner while the call is queued and to the
// dispatch worker once batched. state decides the one terminal result: whoever moves it
// from pending to done writes result and signals done (closes it, or sends
// Do its token); nobody else touches either, and a Do's result, in Do's
// slot, is nobody's but Do's from the send on.
//
// The fields are ordered so that the small ones share words, and the
// first batch and dispatch are kept as durations; when its lane must send
// it is computed (due), not kept, and so is its view of its batch (the
// run's, batchRun.viewOf). The Result is not in the call either: a Do's
// lives in Do's pooled slot, any other call's is made when it ends. So a
// queued call is 224 bytes, four or five cache lines (a call is written
// and read by several goroutines, so each line it spans costs on every
// request; a 240-byte Result inside it made it 512).
type Call struct {
	req      *Request
	b        *Batcher
	rc       *routeConfig
	lane     atomic.Pointer[lane]
	admitted mono // on b.clock, as deadline: 8 bytes each, not a time.Time's 24
	deadline mono
	tokens   int          // estimated prompt tokens plus max_tokens
	tenant   *tenantState // nil: no tenant
	span     trace.Span

	heapIdx int     // index in the lane's deadline heap; -1 when not queued
	tag     float64 // its virtual finish time in its lane level (fair queuing)
	qidx    uint8   // the lane level its current entry is in
	// Owned by the lane while queued, by the runner while dispatched, as
	// are the fields from batchWait to unknownRetries.
	target     uint8 // the route target it is queued for
	dispatched bool  // batchWait and queuedFor are set
	token      bool  // Do's call: done is Do's pooled channel
	progress   bool  // the request's sink takes progress events (ProgressFilter)
	// recycle: Do may reuse the call once it has the result (see
	// finishAs). Written by the finisher before it signals done.
	recycle bool
	late    bool        // queued behind a call admitted after it (lane.lates); lane-owned
	named   bool        // req.Tenant is set: its batch view is its tenant's (viewOf)
	queued  atomic.Bool // in a lane's queue: finish must have it forgotten
	entry   uint32      // its entry's number in its flow of level qidx (fifo)

	batchWait      time.Duration // admission to its first batch
	queuedFor      time.Duration // admission to its first upstream call
	upstream       time.Duration
	attempts       int32
	retries        int32
	unknownRetries int32
	state          atomic.Uint32
	doneState      atomic.Uint32 // done's state when !token (doneNone...)
	// req.Priority and whether req has a Sink, set at admission: the lane
	// owner and the finisher, on other cores than the caller's, read
	// these with the call's other fields instead of the request's lines.
	prio    Priority
	hasSink bool
	slotted bool                     // its memory is its sink's CallHolder slot: released by CallReleased
	run     atomic.Pointer[batchRun] // the batch carrying it now, if any

	stream *streamState // a streamed request's delta buffer; set once at admission
	group  *dedupGroup  // set once at admission for dedupable requests
	timer  *time.Timer  // a dedup follower's deadline
	cache  *CacheKey    // set once at admission when its answer is to be cached

	// evMu orders a request's events: none is emitted after its EventDone.
	// Taken only when its sink takes progress events: without them
	// EventDone is the only event, sent once (state decides it).
	evMu sync.Mutex
	// result is the terminal result: for Do's call its pooled slot's,
	// and for a sink's that holds one its ResultSlot, set at admission;
	// for any other call made by the finisher, so that a queued call
	// carries no room for an answer it does not have yet.
	result *Result
	done   chan struct{} // closed on the result (made by Done); or, when token, sent on once
}

// doSlot is what Do waits on and reads its result from, pooled with its
// channel and its last Call (when Do could reuse that) so that a Do
// allocates none of them and takes one thing from a pool.
type doSlot struct {
	token chan struct{} // capacity 1: the finisher sends on it once
	call  *Call         // a call Do may reuse (finishAs), or nil
	res   Result
}

// due returns when its lane must send it, from its priority's delay.
func (c *Call) due() mono { return c.admitted + mono(c.rc.delays[c.prio]) }

// deadlineTime is c's deadline as a time.Time.
func (c *Call) deadlineTime() time.Time { return c.b.clock.time(c.deadline) }

// since returns the time from c's admission to t.
func (c *Call) since(t time.Time) time.Duration {
	return time.Duration(c.b.clock.monoOf(t) - c.admitted)
}

// Request returns the call's request. After an EventDone that released
// it (Event.Released) it is whatever the sink made of it since.
func (c *Call) Request() *Request { return c.req }

// Done is closed when the call's result is ready.
func (c *Call) Done() <-chan struct{} {
	if s := c.doneState.Load(); s == doneReady {
		return c.done
	} else if s == doneEnded {
		return closedDone
	}
	return c.makeDone()
}

// makeDone makes the done channel that Done returns, unless the call ends
// first or another Done makes it: the slow path of the first Done.
func (c *Call) makeDone() <-chan struct{} {
	for {
		switch c.doneState.Load() {
		case doneReady:
			return c.done
		case doneEnded:
			return closedDone
		case doneNone:
			if !c.doneState.CompareAndSwap(doneNone, doneMaking) {
				continue
			}
			c.done = make(chan struct{})
			if !c.doneState.CompareAndSwap(doneMaking, doneReady) {
				// The finisher ended the call meanwhile and left the
				// closing to us.
				close(c.done)
				c.doneState.Store(doneReady)
			}
			return c.done
		default: // doneMaking, doneEndedMaking: another Done, a few instructions away
			runtime.Gosched()
		}
	}
}

// signalDone closes the done channel of a call that is not Do's, or
// records that it ended before anyone asked for one.
func (c *Call) signalDone() {
	for {
		switch c.doneState.Load() {
		case doneNone:
			if c.doneState.CompareAndSwap(doneNone, doneEnded) {
				return
			}
		case doneMaking:
			if c.doneState.CompareAndSwap(doneMaking, doneEndedMaking) {
				return // its maker closes it
			}
		case doneReady:
			close(c.done)
			return
		default:
			return // ended already: finishAs signals once
		}
	}
}

// Result returns the terminal result. It is valid once Done is closed.
func (c *Call) Result() Result {
	<-c.Done()
	return *c.result
}

// Cancel ends the call with ErrCanceled unless it already ended. It never
// touches the call's batch-mates.
func (c *Call) Cancel() {
	c.finish(Result{Err: ErrCanceled}, time.Now())
}

// pending reports whether the call has no terminal result yet.
func (c *Call) pending() bool { return c.state.Load() == callPending }

// eventPool holds the Events handed to sinks: an Event is not valid after
// OnEvent returns (EventSink's contract), so it goes back at once. Most
// sinks drop most events (a stream that wants completions only), and an
// allocation each would be their largest cost.
var eventPool = sync.Pool{New: func() any { return new(Event) }}

// emit sends a progress event, unless the call already ended or its sink
// takes none.
func (c *Call) emit(ev Event) {
	if !c.progress {
		return
	}
	c.evMu.Lock()
	if c.pending() { // else its request may be its sink's again (Event.Released)
		ev.Request = c.req
		sendEvent(c.req.Sink, &ev)
	}
	c.evMu.Unlock()
}

// sendEvent hands a pooled copy of ev to sink.
func sendEvent(sink EventSink, ev *Event) {
	e := eventPool.Get().(*Event)
	*e = *ev
	sink.OnEvent(e)
	*e = Event{}
	eventPool.Put(e)
}

// finish gives the call its terminal result, once; later calls are no-ops.
// It reports whether this call decided the result.
func (c *Call) finish(r Result, now time.Time) bool { return c.finishAs(&r, now, false) }

// finishAs is finish; byRun says that the caller is a batch run
// delivering its own upstream result, after which the run, whose
// deadline watch has stopped, never looks at the call again. The run
// books the ending of every call it delivers once for the batch
// (batchRun.deliver), so c.run is left as it is: it names the run, so
// no other run can claim c.
//
// Such a call of Do's may go back to Do's pool: nothing else still holds
// it. It must not have been in an eviction list (DEFERRABLE and LOW
// calls are) or a dedup group, or have a sink (whose lock is released
// after done is signalled); no lane's queue holds it once it left. The
// batch run still lists it until the run is recycled, but reads it no
// more, and it left b.runs, which abort walks, before it delivered
// anything. abort sets aborted before it copies b.runs: a run that
// untracked after the copy sees aborted here and keeps the call out of
// the pool. r is the caller's, which finishAs may change (its
// Timings.Total): passed by pointer, since a Result is 30 words.
func (c *Call) finishAs(r *Result, now time.Time, byRun bool) bool {
	decided, holder := c.finishHeld(r, now, byRun)
	if holder != nil {
		// The last touch: from here the call is its holder's again.
		holder.CallReleased()
	}
	return decided
}

// finishHeld is finishAs under the events' lock. It returns, besides
// whether it decided the result, the sink to tell that the call is
// released (CallHolder), or nil; the caller tells it once the lock is
// let go, which is the core's last touch of the call.
func (c *Call) finishHeld(r *Result, now time.Time, byRun bool) (bool, CallHolder) {
	if c.progress {
		c.evMu.Lock()
		defer c.evMu.Unlock()
	}
	if c.cache != nil {
		// Before the state moves: from then on an identical newcomer no
		// longer follows c (dedup), so it must find the answer stored.
		// An upstream answer that arrives after c ended is still a true
		// answer; an error never is stored (cacheStore).
		c.cacheStore(r)
	}
	if !c.state.CompareAndSwap(callPending, callDone) {
		return false, nil // c's request may be its sink's again (Event.Released): unread
	}
	var sink EventSink
	if c.hasSink {
		sink = c.req.Sink
	}
	if c.stream != nil {
		c.stream.end(r)
	}
	r.Timings.Total = c.since(now)
	if c.result == nil {
		c.result = new(Result)
	}
	*c.result = *r
	slotted := c.slotted // read before the signal, after which a Do's call is Do's again
	if c.ended(r, now, byRun, sink) && slotted {
		h, _ := sink.(CallHolder) // slotted: it is one
		return true, h
	}
	return true, nil
}

// settled reports whether nothing in the core but the caller of ended
// reads c or its request once c ended by its batch's answer (byRun): no
// dedup group or timer, no stream, no eviction list (DEFERRABLE and LOW
// calls are in one), no lane's queue, and no abort that may have copied
// b.runs before the run untracked. Do's call may then go back to Do's
// pool, and a sink is told it may reuse the request (Event.Released).
func (c *Call) settled() bool {
	return c.group == nil && c.timer == nil && c.stream == nil &&
		evictClass(c.prio) < 0 && !c.queued.Load() && !c.b.aborted.Load()
}

// plain reports whether c may be delivered through decide and ended: it
// has no sink (whose lock finishAs takes before the state moves), no
// cache key (stored before it), no stream (whose end changes the result)
// and no dedup group (which reads the result after done is signalled).
func (c *Call) plain() bool {
	return !c.hasSink && c.cache == nil && c.stream == nil && c.group == nil
}

// decide is finishAs's first half for a plain call: it moves the state
// from pending to done and returns where the result goes, which the
// caller fills in place and hands to ended; nil when the call ended
// already. Filling Do's slot in place spares a copy of the Result (22
// words) on every request.
func (c *Call) decide() *Result {
	if !c.state.CompareAndSwap(callPending, callDone) {
		return nil
	}
	if c.result == nil {
		c.result = new(Result)
	}
	return c.result
}

// ended is finishAs's second half, once the state moved: the books, the
// span, the sink's event and the signal. r is the result (c.result, or
// for a dedup group the caller's copy of it, which the group reads after
// the signal). It reports whether c was settled (books).
func (c *Call) ended(r *Result, now time.Time, byRun bool, sink EventSink) bool {
	c.b.metrics.finished(c, r)
	settled := c.books(r, now, byRun, sink)
	// The books first, so that whoever Done wakes sees them settled.
	c.b.callEnded()
	group := c.group
	if c.token {
		c.recycle = settled && sink == nil
	}
	c.signal()
	if group != nil {
		// r, not c.result: a Do's slot is Do's again after the send.
		c.b.dedup.leave(c, r, now)
	}
	return settled
}

// books is ended's part before the count of pending calls and the
// signal, after the metrics (which a batch run tallies for the batch):
// the span, the sink's event, the lane, the timer, the run (unless
// byRun) and the tenant. It reports whether c is settled (byRun and
// nothing else reads it: see settled).
func (c *Call) books(r *Result, now time.Time, byRun bool, sink EventSink) (settled bool) {
	if c.span != nil {
		if c.span.IsRecording() { // a span the sampler dropped takes nothing
			if r.Err != nil {
				c.span.SetStatus(codes.Error, r.Err.Error())
			}
			setResultAttrs(c.span, r)
		}
		c.span.End(trace.WithTimestamp(now))
	}
	settled = byRun && c.settled()
	if sink != nil {
		sendEvent(sink, &Event{Kind: EventDone, Time: now, Request: c.req, Result: c.result, Released: settled})
	}
	if c.queued.Load() {
		c.lane.Load().forget(c)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if !byRun { // a run that delivers c books its ending itself (batchRun.deliver)
		if run := c.run.Swap(finishedRun); run != nil && run != finishedRun {
			run.end()
		}
	}
	if c.tenant != nil {
		reserved := c.tokens
		if r.Cached {
			reserved = 0 // its hold went back whole (serveHit)
		}
		c.tenant.ended(now, r.Err, reserved, r.Usage)
	}
	return settled
}

// signal wakes c's waiter once its result is written: it sends Do its
// token (c.recycle, set before, says whether Do may reuse the call), or
// closes done. From the send on, a recycled call is Do's again: the
// caller does not touch it any more.
func (c *Call) signal() {
	if c.token {
		c.done <- struct{}{} // never blocks: capacity 1, sent once
	} else {
		c.signalDone()
	}
}
