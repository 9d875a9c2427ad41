package batcher

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/internal/stack"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// batchRun is one dispatch of one batch. A dispatch worker owns it while it
// runs; calls reach it only through end. Runs are pooled: refs counts the
// worker plus every call still claimed by the run, and the last to let go
// puts it back.
type batchRun struct {
	b       *Batcher
	lane    *lane
	be      *backendState
	pm      *permit
	partial bool // counted in lane.partials
	tracked bool // in b.runs: set by the lane's cut, cleared by the run (untrack)
	formed  time.Time
	batch   Batch
	calls   []*Call // cut by the lane; claimed ones move to live
	live    []*Call
	reqs    []*Request
	out     []Response
	ctx     *runCtx
	alive   atomic.Int32 // claimed calls not yet ended: the last cancels ctx
	refs    atomic.Int32
	span    trace.Span
	watch   deadlineWatch
	flushes []*flushWait // told once the upstream call starts
	wake    []*Call      // deliver's plain calls, ended but not yet signalled
	// tallies are deliver's plain calls' histograms, added before they
	// wake; made at a run's first plain call and kept with the pooled
	// run. A streamed call is never plain, so a run made for one does not
	// hold them (776 bytes) for as long as its answer streams, unless a
	// plain batch had the run before it (runPool).
	tallies *tallies
	later   []int32 // deliver's other calls (r.live's indices), ended after the wake
	// view is every live call's view of the batch (setViews, viewOf)
	// unless mixed: the batch holds several tenants' requests, and
	// tenantIdx and views give each tenant's.
	view      batchView
	mixed     bool
	tenantIdx map[string]int
	views     []batchView
	// upCalls counts the upstream calls the backend reported
	// (Batch.UpstreamCall) during the run's one Dispatch.
	upCalls atomic.Int32
}

// upstreamCall counts one upstream call the backend reported: the
// backend's calls (the first is counted by metricsBackend, for the one
// call a Dispatch that reports none makes) and the call's metrics.
func (r *batchRun) upstreamCall(d time.Duration, err error) {
	if r.upCalls.Add(1) > 1 {
		r.be.stats.calls.Add(1)
	}
	r.b.metrics.upstreamCall(r, d, err)
}

// getRun takes a run from the batcher's pool (one pool per Batcher: a run
// holds a timer, which belongs to the goroutines, or test bubble, that made
// the batcher).
func (b *Batcher) getRun() *batchRun {
	if r, ok := b.runPool.Get().(*batchRun); ok {
		return r
	}
	r := new(batchRun)
	r.ctx = newRunCtx()
	r.watch.timer = time.AfterFunc(math.MaxInt64, r.watch.fire)
	r.watch.timer.Stop()
	r.watch.stopped = true
	return r
}

// finishedRun marks a call that ended: no run may claim it any more.
var finishedRun = new(batchRun)

// end books one of the run's calls ending; the last one cancels the
// upstream call, whose result nobody awaits any more.
func (r *batchRun) end() {
	if r.alive.Add(-1) == 0 {
		r.ctx.cancel()
	}
	r.unref()
}

// endN is end for n calls at once: those the run delivered itself. The
// worker's own reference outlives it, so it never recycles the run.
func (r *batchRun) endN(n int32) {
	if n == 0 {
		return
	}
	if r.alive.Add(-n) == 0 {
		r.ctx.cancel()
	}
	r.refs.Add(-n)
}

func (r *batchRun) unref() {
	if r.refs.Add(-1) == 0 {
		r.recycle()
	}
}

func (r *batchRun) recycle() {
	clear(r.calls)
	clear(r.live)
	clear(r.reqs)
	clear(r.out)
	b := r.b
	r.calls, r.live, r.reqs, r.out = r.calls[:0], r.live[:0], r.reqs[:0], r.out[:0]
	r.b, r.lane, r.be, r.pm, r.span = nil, nil, nil, nil, nil
	r.batch = Batch{}
	r.upCalls.Store(0)
	if !r.ctx.reset() {
		// A derived context may still hold on to it: never reuse it.
		r.ctx = newRunCtx()
	}
	b.runPool.Put(r)
}

// newRun turns calls cut from l into a batch with the permit pm.
func (l *lane) newRun(pm *permit, now time.Time) *batchRun {
	b := l.b
	tg := l.route.targets[l.key.target]
	r := b.getRun()
	r.b, r.lane, r.be, r.pm, r.formed = b, l, tg.be, pm, now
	r.batch = Batch{
		ID:        "b" + strconv.FormatUint(b.batchSeq.Add(1), 36),
		Route:     l.route.Name,
		Model:     tg.model,
		Op:        l.route.Op,
		MaxTokens: l.key.maxTokens,
		run:       r,
	}
	if r.batch.MaxTokens == 0 { // not shared: each request holds its own
		r.batch.MaxTokens = l.route.DefaultMaxTokens
	}
	return r
}

// worker is one of a backend's dispatch goroutines. There are as many as
// the backend's MaxConcurrency: a permit is a slot, so a batch handed over
// with its permit never waits for a worker for long.
func (s *backendState) worker(wg *sync.WaitGroup) {
	defer wg.Done()
	// A dispatch goes deep (the backend's HTTP client, the caller's
	// stream): the worker's stack, grown by its first, stays grown while
	// it waits for the next (stack.Hold), rather than shrinking at each GC
	// and growing again, with a copy each way, deep inside the next call.
	stack.Hold(func() {
		for r := range s.work {
			r.run()
		}
	})
}

// run dispatches the batch and delivers its results: successes at once,
// retryable failures back to their lane after a backoff, the rest as errors.
func (r *batchRun) run() {
	defer r.done()
	if !r.claim() {
		r.flushed()
		r.be.giveBack(r.pm)
		return
	}
	var ticket Ticket
	if r.be.shared != nil {
		var ok bool
		if ticket, ok = r.acquire(); !ok {
			return
		}
	}
	ctx, start := r.prepare()
	end, err := r.call(ctx, start)
	v := r.verdict(err)
	r.be.release(r.pm, v.used, v.lesson, v.info, nil)
	r.b.metrics.dispatched(r, r.out, end.Sub(start), err, v.used)
	r.deliver(err, end, end.Sub(start))
	if ticket.Release != nil {
		ticket.Release(r.outcome(v, err))
	}
}

// done ends the run on every path: its lane's counts, the set of tracked
// runs (on the paths that return before delivering) and the worker's
// reference.
func (r *batchRun) done() {
	l := r.lane
	if r.partial {
		l.partials.Add(-1)
		l.nudge() // an early send may go now
	}
	l.inFlight.Add(-int32(len(r.calls)))
	r.b.untrack(r)
	r.unref()
}

// claim claims the calls that are still live and reports whether any is.
// The counts go up first, for every call at once: a call may end the
// moment it is claimed. The loop holds one count of its own, so that a
// call claimed and ended before the next is claimed does not cancel the
// batch under its batch-mates; the calls it could not claim give theirs
// back with it, in one write each (two atomic adds a call were 2% of the
// CPU at 512 producers).
func (r *batchRun) claim() bool {
	n := int32(len(r.calls))
	r.refs.Store(1 + n)
	r.alive.Store(1 + n)
	var lost int32
	for _, c := range r.calls {
		if c.run.CompareAndSwap(nil, r) {
			r.live = append(r.live, c)
			r.reqs = append(r.reqs, c.req)
			if h := r.b.testHookClaimed; h != nil {
				h(c)
			}
		} else {
			lost++
		}
	}
	if lost > 0 {
		r.refs.Add(-lost) // never 0 here: the loop's own count is still held
	}
	if r.alive.Add(-1-lost) == 0 { // every claimed call ended meanwhile
		r.ctx.cancel()
		clear(r.live)
		r.live = r.live[:0]
	}
	return len(r.live) > 0
}

// prepare fills in the batch and books the dispatch on each call: its
// waits, its attempt, its events. It returns the batch's context and the
// time the attempt starts.
func (r *batchRun) prepare() (context.Context, time.Time) {
	r.batch.Requests = r.reqs
	if r.lane.key.stream {
		// The batch is its request: its own max_tokens is the batch's.
		r.batch.stream = r.live[0].stream
		if mt := r.live[0].req.Params.MaxTokens; mt > 0 {
			r.batch.MaxTokens = mt
		}
	}
	var ctx context.Context = r.ctx
	if r.b.tracer != nil {
		ctx = r.startSpan(ctx, r.live)
	}
	k := r.b.clock
	start := k.now()
	formedM, startM := k.monoOf(r.formed), k.monoOf(start)
	last := mono(math.MinInt64)
	r.setViews()
	for _, c := range r.live {
		if !c.dispatched {
			c.dispatched = true
			c.batchWait, c.queuedFor = time.Duration(formedM-c.admitted), time.Duration(startM-c.admitted)
		}
		c.attempts++
		last = max(last, c.deadline)
		c.dispatchEvent(r, start)
		if c.progress {
			v := r.viewOf(c)
			c.emit(Event{Kind: EventBatched, Time: r.formed, BatchID: v.id, BatchSize: v.size})
			c.emit(Event{Kind: EventDispatched, Time: start, BatchID: v.id, Attempt: int(c.attempts), Backend: r.be.name})
		}
	}
	r.batch.deadline = time.Time{}
	if len(r.live) > 0 {
		r.batch.deadline = k.time(last)
	}
	r.batch.verdict, r.pm.done = r.pm.done, nil
	return ctx, start
}

// call makes the upstream call, with the deadline watch running, and ends
// the batch's span. It returns when the call ended and its error.
func (r *batchRun) call(ctx context.Context, start time.Time) (time.Time, error) {
	be := r.be
	n := len(r.live)
	// Deadlines keep firing while the upstream call runs.
	r.watch.start(r.live, start)
	if cap(r.out) < n {
		r.out = make([]Response, n)
	}
	r.out = r.out[:n]
	r.flushed()
	if r.batch.stream != nil {
		be.stats.streamed.Add(1)
		be.stats.streaming.Add(1)
	}
	err := be.impl.Dispatch(ctx, &r.batch, r.out)
	if r.batch.stream != nil {
		be.stats.streaming.Add(-1)
	}
	r.watch.stop()
	// From here the run delivers its calls itself, and a call it delivers
	// may go back to Do's pool at once: abort must not find it in b.runs.
	r.b.untrack(r)
	end := r.b.clock.now()
	if r.span != nil {
		if r.span.IsRecording() {
			if err != nil {
				r.span.RecordError(err)
			}
			setBatchResultAttrs(r.span, r.out)
		}
		r.span.End(trace.WithTimestamp(end))
	}
	return end, err
}

// runVerdict is what a batch's answer tells its backend's budget.
type runVerdict struct {
	used        cost           // what the batch spent
	rateLimited bool           // the upstream answered 429, to the batch or to one of its requests
	limited     *RateLimitInfo // the first 429's details
	lesson      lesson         // what the limits learn: a 429 lowers them, a success may raise them
	info        *RateLimitInfo // what the upstream said of its budget, for the lesson
}

// verdict reads the budget's lesson from the answer, for the permit's
// release: a 429 lowers the limits, a success may raise them; the tokens
// the replies report settle the reservation.
func (r *batchRun) verdict(err error) runVerdict {
	v := runVerdict{used: cost{requests: r.pm.requests, tokens: r.pm.tokens}}
	reported := false
	tokens := 0
	for i := range r.out {
		if e := r.out[i].Err; e != nil {
			if classify(e) == ClassRateLimit {
				v.rateLimited, v.limited = true, rateInfo(e, v.limited)
			}
			continue
		}
		if u := r.out[i].Usage.Total(); u > 0 {
			reported = true
			tokens += int(u)
		}
	}
	if err != nil && classify(err) == ClassRateLimit {
		v.rateLimited, v.limited = true, rateInfo(err, v.limited)
	}
	if reported {
		v.used.tokens = tokens // settle the reservation against what was used
	}
	if v.rateLimited {
		v.lesson, v.info = lessonRateLimited, v.limited
	} else if err == nil {
		v.lesson, v.info = lessonSuccess, r.batch.RateLimit
	}
	return v
}

// deliver ends each live call with its answer, or sends it back to its
// lane for a retry or on to a fallback.
//
// The calls it ends are booked in the run once for the batch (endN), not
// one by one in Call.ended: two atomic adds a call on the run's shared
// line.
func (r *batchRun) deliver(err error, end time.Time, elapsed time.Duration) {
	endM := r.b.clock.monoOf(end) // one conversion for the whole batch
	var ended int32
	for i, c := range r.live {
		if !c.plain() {
			// After the plain calls' wake-up: a sink's event runs on this
			// goroutine, and a slow one held every plain caller of the batch.
			r.later = append(r.later, int32(i))
			continue
		}
		ended += r.deliverCall(i, c, true, err, end, endM, elapsed)
	}
	if r.tallies != nil {
		r.tallies.flush()
	}
	r.signal()
	for j, i := range r.later {
		r.later[j] = 0
		ended += r.deliverCall(int(i), r.live[i], false, err, end, endM, elapsed)
	}
	r.later = r.later[:0]
	r.endN(ended)
}

// deliverCall is deliver's part for the run's ith live call c, plain as
// deliver found it: it retries c, or ends it (a plain call's wake-up
// waits for signal). It returns 1 when it ended c, 0 otherwise.
func (r *batchRun) deliverCall(i int, c *Call, plain bool, err error, end time.Time, endM mono, elapsed time.Duration) int32 {
	if !c.pending() {
		return 0
	}
	c.upstream += elapsed
	resp := &r.out[i]
	e := resp.Err
	if e == nil && err != nil && resp.empty() {
		e = err
	}
	if e != nil && endM >= c.deadline {
		e = ErrDeadline // the batch context ran out with the request's time
	}
	if e != nil && c.retryable() && (r.b.retryLater(c, r, e, end) || r.b.fallBack(c, r, e, end)) {
		r.end() // the run lets go of it
		return 0
	}
	if !plain {
		var res Result
		r.result(&res, c, resp, e)
		if c.finishAs(&res, end, true) {
			return 1
		}
		return 0
	}
	// Written in place, into Do's slot for Do's call.
	res := c.decide()
	if res == nil {
		return 0
	}
	r.result(res, c, resp, e)
	res.Timings.Total = time.Duration(endM - c.admitted) // c.since(end)
	r.b.metrics.finishedBy(r, c, res)
	if c.books(res, end, true, nil) && c.token {
		c.recycle = true
	}
	r.wake = append(r.wake, c)
	return 1
}

// signal ends deliver's plain calls: their results are written and their
// books done (Call.books), so their count of pending calls goes at once,
// and then each waiter is woken (Call.signal), the whole batch in a row.
// Two passes, rather than Call.ended for each in turn, so that the shared
// count is written once a batch, and the waiters woken first do not run
// against the books of their batch-mates.
func (r *batchRun) signal() {
	if len(r.wake) == 0 {
		return
	}
	if h := r.b.testHookWake; h != nil {
		h()
	}
	r.b.callsEnded(int64(len(r.wake)))
	for i, c := range r.wake {
		r.wake[i] = nil // c may be Do's again from its signal on
		c.signal()
	}
	r.wake = r.wake[:0]
}

// result fills in res, c's result from its answer resp, or the error e.
func (r *batchRun) result(res *Result, c *Call, resp *Response, e error) {
	v := r.viewOf(c)
	*res = Result{}
	res.BatchID, res.BatchSize = v.id, v.size
	res.Attempts, res.Backend = int(c.attempts), r.be.name
	res.Timings.BatchWait, res.Timings.Queued, res.Timings.Upstream = c.batchWait, c.queuedFor, c.upstream
	if e != nil {
		res.Err = e
		return
	}
	res.Text, res.Embedding, res.FinishReason, res.Usage = resp.Text, resp.Embedding, resp.FinishReason, resp.Usage
	res.Chat = resp.Chat
}

// outcome is how the batch went, for the fleet's books.
func (r *batchRun) outcome(v runVerdict, err error) Outcome {
	o := Outcome{Requests: v.used.requests, Tokens: v.used.tokens, Called: true, RateLimited: v.rateLimited, Succeeded: err == nil && !v.rateLimited}
	if v.rateLimited {
		o.RateLimit = v.limited
		if v.limited != nil {
			o.RetryAfter = v.limited.RetryAfter
		}
	} else {
		o.RateLimit = r.batch.RateLimit
	}
	if r.be.breakerOpen() {
		o.OpenFor = r.be.cfg.Breaker.Cooldown
	}
	return o
}

// acquire books the batch in the fleet's budget (coordinator.go) and
// follows what the fleet has left. It reports false when the batch is not
// to go: its calls ended while it waited, or the fleet holds the backend
// open (its calls move to a fallback, or fail).
func (r *batchRun) acquire() (Ticket, bool) {
	be := r.be
	r.watch.start(r.live, time.Now()) // deadlines keep firing while it waits
	t, err := be.shared.Acquire(r.ctx, be.demand(r.pm))
	if err == nil {
		be.follow(r.pm, t)
		return t, true
	}
	r.watch.stop()
	if errors.Is(err, ErrNoBackend) {
		r.failOver(err)
	}
	r.flushed()
	be.giveBack(r.pm)
	return t, false
}

// failOver moves the run's live calls to their routes' next targets, or
// ends them with err.
func (r *batchRun) failOver(err error) {
	r.b.untrack(r) // before any call moves on and is delivered elsewhere (see run)
	now := time.Now()
	for _, c := range r.live {
		next := int(c.target) + 1
		if next < len(c.rc.targets) && r.b.clock.monoOf(now) < c.deadline && c.run.CompareAndSwap(r, nil) {
			c.target = uint8(next)
			c.retries, c.unknownRetries = 0, 0
			r.be.stats.fallbacks.Add(1)
			r.be.log.fellBack(c, c.rc.Name, c.target, err)
			r.b.enqueue(c)
			r.end()
			continue
		}
		c.finish(Result{Err: err, Backend: r.be.name}, now)
	}
}

// flushed tells the flushes waiting on the run's calls that they are sent.
func (r *batchRun) flushed() {
	for i, fw := range r.flushes {
		fw.sent()
		r.flushes[i] = nil
	}
	r.flushes = r.flushes[:0]
}

// rateInfo keeps the first rate-limit details found.
func rateInfo(err error, prev *RateLimitInfo) *RateLimitInfo {
	if prev != nil {
		return prev
	}
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return ue.RateLimit
	}
	return nil
}

// startSpan starts the batch's span: a new root linked to every request's
// span, which links back.
func (r *batchRun) startSpan(ctx context.Context, calls []*Call) context.Context {
	links := make([]trace.Link, 0, len(calls))
	for _, c := range calls {
		if c.span == nil {
			continue
		}
		links = append(links, trace.Link{
			SpanContext: c.span.SpanContext(),
			Attributes:  []attribute.KeyValue{attrRequestID.String(c.req.ID)},
		})
	}
	ctx, span := r.b.tracer.Start(ctx, "batcher.batch "+r.batch.Route,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...),
		trace.WithAttributes(
			attrBatchSize.Int(len(calls)),
			attrBatchID.String(r.batch.ID),
			attrRoute.String(r.batch.Route),
			attrBackend.String(r.be.name),
		))
	r.span = span
	if !span.IsRecording() {
		return ctx // the sampler dropped it: no attributes, no links back
	}
	span.SetAttributes(r.genAIBatchAttrs(calls[0].req)...)
	bsc := span.SpanContext()
	for _, c := range calls {
		if c.span != nil && c.span.IsRecording() {
			c.span.AddLink(trace.Link{SpanContext: bsc, Attributes: []attribute.KeyValue{attrBatchID.String(r.batch.ID)}})
			c.span.SetAttributes(attrBatchID.String(r.batch.ID), attrBatchSize.Int(len(calls)))
		}
	}
	return ctx
}
