package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The dispatch concerns wrap the configured Backend, outermost first:
//
//	breakerVerdict{metricsBackend{attemptTimeout{recoverBackend{streamBackend{Backend}}}}}
//
// streamBackend turns a streamed request's batch into the backend's Stream
// call (stream.go).
// recoverBackend is innermost, so that a panic becomes an error every other
// layer sees. attemptTimeout bounds the backend call itself and calls the
// end of its own deadline a timeout (not the batch's cancellation).
// metricsBackend sits outside the timeout, so that it times the whole
// attempt and counts the error the timeout translated. breakerVerdict is
// outermost: it judges the final error, and calls an error that came after
// every caller had stopped waiting (the batch context cancelled) "unused",
// since it says nothing of the backend's health. Rate limits and retries
// are not layers here: the permit was granted before the call (limits.go),
// and a retry puts a request back into its lane, possibly into another
// batch (retry.go).
func decorate(impl Backend, s *backendState) Backend {
	return breakerVerdict{metricsBackend{attemptTimeout{recoverBackend{streamBackend{impl}}, s.cfg.AttemptTimeout, s.cfg.Retry.MaxRetries + 1, s.cfg.StreamIdleTimeout}, s}}
}

// recoverBackend turns a backend's panic into an error, so that one bad
// backend cannot take the service down.
type recoverBackend struct{ next Backend }

func (d recoverBackend) Dispatch(ctx context.Context, b *Batch, out []Response) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &UpstreamError{Class: ClassUnknown, Message: "backend failed", Err: fmt.Errorf("backend panic: %v", p)}
		}
	}()
	return d.next.Dispatch(ctx, b, out)
}

// attemptTimeout bounds one upstream call: by the configured timeout, or,
// when none is, by an even share of what is left of the batch's deadline
// over the attempts the retry policy allows, within a cap per operation. It
// needs a context of its own only when its timeout ends before the last of
// the batch's deadlines.
type attemptTimeout struct {
	next     Backend
	timeout  time.Duration // 0: automatic
	attempts int           // the retry policy's attempts per request
	idle     time.Duration // a streamed answer's longest silence after its first delta
}

// timeoutFor returns the attempt's timeout for b at now.
func (d attemptTimeout) timeoutFor(b *Batch, now time.Time) time.Duration {
	if d.timeout > 0 {
		return d.timeout
	}
	limit := DefaultAttemptTimeout
	if b.Op == OpEmbedding {
		limit = DefaultEmbeddingAttemptTimeout
	}
	share := b.deadline.Sub(now) / time.Duration(max(d.attempts, 1))
	return min(limit, max(share, minAttemptTimeout))
}

func (d attemptTimeout) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	if b.stream != nil {
		return d.dispatchStream(ctx, b, out)
	}
	now := time.Now()
	timeout := d.timeoutFor(b, now)
	if !now.Add(timeout).Before(b.deadline) {
		return d.next.Dispatch(ctx, b, out)
	}
	if rc, ok := ctx.(*runCtx); ok {
		// The batch's own context takes the deadline: a batch makes one
		// attempt, so its context ends with it, and nothing is allocated.
		rc.expireAfter(timeout)
		err := d.next.Dispatch(ctx, b, out)
		if rc.stopExpiry() && err != nil {
			err = attemptTimedOut(timeout, err)
		}
		return err
	}
	actx, cancel := context.WithTimeoutCause(ctx, timeout, errAttemptTimeout)
	defer cancel()
	err := d.next.Dispatch(actx, b, out)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) {
		err = attemptTimedOut(timeout, err)
	}
	return err
}

// attemptTimedOut is the error of an attempt that outlived its timeout. Its
// message is the cause alone: the server prefixes "upstream timed out".
func attemptTimedOut(timeout time.Duration, err error) error {
	return &UpstreamError{Class: ClassTimeout, Message: "no answer within the attempt timeout of " + timeout.Round(time.Millisecond).String(), Err: err}
}

// metricsBackend counts calls and the requests they carry.
type metricsBackend struct {
	next Backend
	s    *backendState
}

func (d metricsBackend) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	n := len(b.Requests)
	d.s.stats.calls.Add(1)
	d.s.stats.items.Add(int64(n))
	d.s.retry.sent(time.Now(), n)
	return d.next.Dispatch(ctx, b, out)
}

// breakerVerdict tells the breaker how the call went.
type breakerVerdict struct{ next Backend }

func (d breakerVerdict) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	err := d.next.Dispatch(ctx, b, out)
	if v := b.verdict; v != nil {
		b.verdict = nil
		if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			v(errUnused) // nobody awaited the answer
		} else {
			v(err)
		}
	}
	return err
}

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
	// tenantIdx and views serve setViews for batches of several tenants.
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
	for r := range s.work {
		r.run()
	}
}

// startWorkers starts the backend's workers on its first batch; a raised
// MaxConcurrency starts more (setLimits).
func (s *backendState) startWorkers(b *Batcher) {
	if s.workersStartedA.Load() {
		return
	}
	s.mu.Lock()
	n := 0
	if !s.workersStarted {
		s.workersStarted, n = true, s.cfg.MaxConcurrency
		s.workersN = n
	}
	s.mu.Unlock()
	b.workers.Add(n)
	for range n {
		go s.worker(&b.workers)
	}
	s.workersStartedA.Store(true)
}

// run dispatches the batch and delivers its results: successes at once,
// retryable failures back to their lane after a backoff, the rest as errors.
func (r *batchRun) run() {
	b, be, l := r.b, r.be, r.lane
	defer func() {
		if r.partial {
			l.partials.Add(-1)
			l.nudge() // an early send may go now
		}
		l.inFlight.Add(-int32(len(r.calls)))
		b.untrack(r) // on the paths that return before delivering
		r.unref()
	}()

	// Claim the calls that are still live. The count goes up first: a call
	// may end the moment it is claimed. The loop holds one count of its
	// own, so that a call claimed and ended before the next is claimed
	// does not cancel the batch under its batch-mates.
	r.refs.Store(1)
	r.alive.Store(1)
	for _, c := range r.calls {
		r.refs.Add(1)
		r.alive.Add(1)
		if c.run.CompareAndSwap(nil, r) {
			r.live = append(r.live, c)
			r.reqs = append(r.reqs, c.req)
			if h := b.testHookClaimed; h != nil {
				h(c)
			}
		} else {
			r.alive.Add(-1)
			r.refs.Add(-1)
		}
	}
	if r.alive.Add(-1) == 0 { // every claimed call ended meanwhile
		r.ctx.cancel()
		clear(r.live)
		r.live = r.live[:0]
	}
	if len(r.live) == 0 {
		r.flushed()
		be.giveBack(r.pm)
		return
	}
	var ticket Ticket
	if be.shared != nil {
		var ok bool
		if ticket, ok = r.acquire(); !ok {
			return
		}
	}
	r.batch.Requests = r.reqs
	if l.key.stream {
		// The batch is its request: its own max_tokens is the batch's.
		r.batch.stream = r.live[0].stream
		if mt := r.live[0].req.Params.MaxTokens; mt > 0 {
			r.batch.MaxTokens = mt
		}
	}
	var ctx context.Context = r.ctx
	if b.tracer != nil {
		ctx = r.startSpan(ctx, r.live)
	}

	live := r.live
	n := len(live)
	start := time.Now()
	var last time.Time
	r.setViews()
	for _, c := range live {
		if !c.dispatched {
			c.dispatched = true
			c.batchWait, c.queuedFor = r.formed.Sub(c.admitted), start.Sub(c.admitted)
		}
		c.attempts++
		if c.deadline.After(last) {
			last = c.deadline
		}
		c.dispatchEvent(r, start)
		if c.progress {
			c.emit(Event{Kind: EventBatched, Time: r.formed, BatchID: c.view.id, BatchSize: c.view.size})
			c.emit(Event{Kind: EventDispatched, Time: start, BatchID: c.view.id, Attempt: int(c.attempts), Backend: be.name})
		}
	}
	r.batch.deadline = last
	r.batch.verdict, r.pm.done = r.pm.done, nil

	// Deadlines keep firing while the upstream call runs.
	r.watch.start(live, start)
	if cap(r.out) < n {
		r.out = make([]Response, n)
	}
	r.out = r.out[:n]
	out := r.out
	r.flushed()
	if r.batch.stream != nil {
		be.stats.streamed.Add(1)
		be.stats.streaming.Add(1)
	}
	err := be.impl.Dispatch(ctx, &r.batch, out)
	if r.batch.stream != nil {
		be.stats.streaming.Add(-1)
	}
	r.watch.stop()
	// From here the run delivers its calls itself, and a call it delivers
	// may go back to Do's pool at once: abort must not find it in b.runs.
	b.untrack(r)
	end := time.Now()
	elapsed := end.Sub(start)
	if r.span != nil {
		if r.span.IsRecording() {
			if err != nil {
				r.span.RecordError(err)
			}
			setBatchResultAttrs(r.span, out)
		}
		r.span.End(trace.WithTimestamp(end))
	}

	// Tell the budget how it went.
	used := cost{requests: r.pm.requests, tokens: r.pm.tokens}
	var limited *RateLimitInfo
	rateLimited := false
	reported := false
	tokens := 0
	for i := range out {
		if e := out[i].Err; e != nil {
			if classify(e) == ClassRateLimit {
				rateLimited, limited = true, rateInfo(e, limited)
			}
			continue
		}
		if u := out[i].Usage.Total(); u > 0 {
			reported = true
			tokens += int(u)
		}
	}
	if err != nil && classify(err) == ClassRateLimit {
		rateLimited, limited = true, rateInfo(err, limited)
	}
	if reported {
		used.tokens = tokens // settle the reservation against what was used
	}
	if rateLimited {
		be.onRateLimited(r.pm, limited)
	} else if err == nil {
		be.onSuccess(r.pm, r.batch.RateLimit)
	}
	be.release(r.pm, used, nil)
	b.metrics.dispatched(r, out, elapsed.Seconds(), err, used)

	for i, c := range live {
		if !c.pending() {
			continue
		}
		c.upstream += elapsed
		resp := &out[i]
		e := resp.Err
		if e == nil && err != nil && resp.empty() {
			e = err
		}
		if e != nil && !end.Before(c.deadline) {
			e = ErrDeadline // the batch context ran out with the request's time
		}
		if e != nil && c.retryable() && (b.retryLater(c, r, e, end) || b.fallBack(c, r, e, end)) {
			r.end() // the run lets go of it
			continue
		}
		res := Result{
			BatchID:   c.view.id,
			BatchSize: c.view.size,
			Attempts:  int(c.attempts),
			Backend:   be.name,
			Timings: Timings{
				BatchWait: c.batchWait,
				Queued:    c.queuedFor,
				Upstream:  c.upstream,
			},
		}
		if e != nil {
			res.Err = e
		} else {
			res.Text, res.Embedding, res.FinishReason, res.Usage = resp.Text, resp.Embedding, resp.FinishReason, resp.Usage
			res.ToolCalls, res.Refusal, res.Logprobs, res.Choices = resp.ToolCalls, resp.Refusal, resp.Logprobs, resp.Choices
		}
		c.finishAs(&res, end, true)
	}
	if ticket.Release != nil {
		o := Outcome{Requests: used.requests, Tokens: used.tokens, Called: true, RateLimited: rateLimited, Succeeded: err == nil && !rateLimited}
		if rateLimited {
			o.RateLimit = limited
			if limited != nil {
				o.RetryAfter = limited.RetryAfter
			}
		} else {
			o.RateLimit = r.batch.RateLimit
		}
		if be.breakerOpen() {
			o.OpenFor = be.cfg.Breaker.Cooldown
		}
		ticket.Release(o)
	}
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
		if next < len(c.rc.targets) && now.Before(c.deadline) && c.run.CompareAndSwap(r, nil) {
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

// runCtx is a batch's context: cancelled when none of its calls awaits the
// answer any more (Err: context.Canceled), or when the attempt's timeout
// passes (context.DeadlineExceeded). It is pooled with its run, and makes
// its Done channel only when someone asks for it, so that a backend that
// never looks costs nothing. It implements AfterFunc, so that contexts
// derived from it need no goroutine to follow it; it calls them
// synchronously when cancelled. One that was ever given an AfterFunc, or
// asked for its Done channel, is not reused: a derived context may outlive
// the run. (A child of a context that wraps it, such as the span's
// context.WithValue, is followed by a goroutine of the context package
// that calls Done, and Err once Done closes, however late: a reset would
// make that Err nil, which the context package panics on.)
type runCtx struct {
	mu       sync.Mutex
	done     chan struct{}
	err      error
	deadline time.Time
	after    []*runAfter
	used     bool        // AfterFunc or Done was called: not reusable
	expiry   *time.Timer // the attempt timeout; made once
}

type runAfter struct {
	f       func()
	stopped bool
}

func newRunCtx() *runCtx {
	c := new(runCtx)
	c.expiry = time.AfterFunc(math.MaxInt64, func() { c.end(context.DeadlineExceeded) })
	c.expiry.Stop()
	return c
}

func (c *runCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, !c.deadline.IsZero()
}

func (c *runCtx) Value(any) any { return nil }

func (c *runCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Whoever holds the channel may call Err once it closes, however late
	// (the context package's goroutine for a child of a wrapped runCtx
	// does): a context whose Done was handed out is never reset for reuse.
	c.used = true
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *runCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc runs f once the context ends (context.AfterFunc's contract,
// which the context package uses for derived contexts).
func (c *runCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used = true
	a := &runAfter{f: f}
	if c.err != nil {
		go f() // already ended: as context.AfterFunc does
		return func() bool { return false }
	}
	c.after = append(c.after, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if a.stopped || c.err != nil {
			return false
		}
		a.stopped = true
		return true
	}
}

// expireAfter makes the context end with DeadlineExceeded after d.
func (c *runCtx) expireAfter(d time.Duration) {
	c.mu.Lock()
	c.deadline = time.Now().Add(d)
	c.mu.Unlock()
	c.expiry.Reset(d)
}

// stopExpiry stops the attempt timeout and reports whether it had fired.
func (c *runCtx) stopExpiry() bool {
	c.expiry.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Is(c.err, context.DeadlineExceeded)
}

func (c *runCtx) cancel() { c.end(context.Canceled) }

func (c *runCtx) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	after := c.after
	c.after = nil
	c.mu.Unlock()
	// Run synchronously, not in goroutines of their own: the functions are
	// the context package's (cancelling a derived context, which takes no
	// lock of ours).
	for _, a := range after {
		c.mu.Lock()
		stopped := a.stopped
		a.stopped = true
		c.mu.Unlock()
		if !stopped {
			a.f()
		}
	}
}

// reset readies the context for the next run and reports true, or reports
// false, leaving it as it is, when someone may still hold on to it.
func (c *runCtx) reset() bool {
	c.expiry.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.used {
		return false
	}
	c.done, c.err, c.after, c.deadline = nil, nil, nil, time.Time{}
	return true
}

// deadlineWatch ends a dispatched batch's calls as their deadlines pass. Its
// timer is made once per pooled run and reset for each batch.
type deadlineWatch struct {
	mu      sync.Mutex // held while fire looks at calls, and by start and stop
	calls   []*Call
	timer   *time.Timer
	stopped bool
}

func (w *deadlineWatch) start(calls []*Call, now time.Time) {
	w.mu.Lock()
	w.calls, w.stopped = calls, false
	w.timer.Reset(w.nextLocked(now).Sub(now))
	w.mu.Unlock()
}

func (w *deadlineWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.calls = nil
	w.mu.Unlock()
}

// nextLocked returns the earliest deadline among live calls, or a time far
// ahead.
func (w *deadlineWatch) nextLocked(now time.Time) time.Time {
	next := now.Add(time.Hour)
	for _, c := range w.calls {
		if c.pending() && c.deadline.Before(next) {
			next = c.deadline
		}
	}
	return next
}

func (w *deadlineWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	for _, c := range w.calls {
		if c.pending() && !c.deadline.After(now) {
			c.finish(Result{Err: ErrDeadline}, now)
		}
	}
	w.timer.Reset(w.nextLocked(now).Sub(now))
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
