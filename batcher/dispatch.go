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

// batchRun is one dispatch of one batch. Its runner goroutine owns it; calls
// reach it only through forget. calls never changes once the run starts.
type batchRun struct {
	b       *Batcher
	lane    *lane
	be      *backendState
	pm      *permit
	partial bool // counted in lane.partials
	batch   Batch
	calls   []*Call
	ctx     context.Context
	cancel  context.CancelFunc
	live    atomic.Int32 // calls of this run not yet ended
	span    trace.Span
}

// finishedRun marks a call that ended: no run may claim it any more.
var finishedRun = new(batchRun)

// forget books one of the run's calls ending; the last one cancels the
// upstream call, whose result nobody awaits any more.
func (r *batchRun) forget() {
	if r.live.Add(-1) == 0 {
		r.cancel()
	}
}

// startLocked turns calls cut from l into a batch and starts its runner. The
// caller holds l.mu and the permit pm, which the runner releases.
func (l *lane) startLocked(calls []*Call, pm *permit, now time.Time) {
	b := l.b
	id := "b" + strconv.FormatUint(b.batchSeq.Add(1), 36)
	tg := l.route.targets[l.key.target]
	r := &batchRun{
		b:    b,
		lane: l,
		be:   tg.be,
		pm:   pm,
		batch: Batch{
			ID:        id,
			Route:     l.route.Name,
			Model:     tg.model,
			Op:        l.route.Op,
			MaxTokens: l.key.maxTokens,
		},
		calls:   calls,
		partial: len(calls) < l.route.Batch.MaxBatchSize,
	}
	if r.partial {
		l.partials.Add(1)
	}
	// The batch's context ends when none of its calls awaits the answer any
	// more: cancelled, expired (the deadline watch ends them) or answered.
	r.ctx, r.cancel = context.WithCancel(context.Background())
	b.track(r)
	b.wg.Add(1)
	go r.run(now)
}

// run dispatches the batch and delivers its results: successes at once,
// retryable failures back to their lane after a backoff, the rest as errors.
func (r *batchRun) run(formed time.Time) {
	b, be := r.b, r.be
	defer b.wg.Done()
	defer b.untrack(r)
	defer r.cancel()
	if r.partial {
		defer func() {
			r.lane.partials.Add(-1)
			r.lane.nudge() // an early send may go now
		}()
	}

	// Claim the calls that are still live.
	reqs := make([]*Request, 0, len(r.calls))
	live := make([]*Call, 0, len(r.calls))
	r.live.Store(int32(len(r.calls)))
	for _, c := range r.calls {
		if c.run.CompareAndSwap(nil, r) {
			live = append(live, c)
			reqs = append(reqs, c.req)
		} else {
			r.live.Add(-1)
		}
	}
	if len(live) == 0 {
		be.giveBack(r.pm)
		return
	}
	r.batch.Requests = reqs
	ctx := r.ctx
	if b.tracer != nil {
		ctx = r.startSpan(ctx, live)
	}

	n := len(live)
	start := time.Now()
	for _, c := range live {
		if c.batchedAt.IsZero() {
			c.batchedAt = formed
		}
		if c.dispatchedAt.IsZero() {
			c.dispatchedAt = start
		}
		c.attempts++
		if c.req.Sink != nil {
			c.emit(&Event{Kind: EventBatched, Time: formed, BatchID: r.batch.ID, BatchSize: n})
			c.emit(&Event{Kind: EventDispatched, Time: start, BatchID: r.batch.ID, Attempt: c.attempts, Backend: be.name})
		}
	}
	be.stats.calls.Add(1)
	be.stats.items.Add(int64(n))
	be.retry.sent(start, n)

	// Deadlines keep firing while the upstream call runs.
	w := &deadlineWatch{calls: live}
	w.timer = time.AfterFunc(math.MaxInt64, w.fire)
	w.timer.Reset(w.next(start).Sub(start))

	out := make([]Response, n)
	// The attempt's own timeout needs a context of its own only when it
	// ends before the last of the batch's deadlines.
	actx := ctx
	if start.Add(be.cfg.AttemptTimeout).Before(w.last()) {
		var acancel context.CancelFunc
		actx, acancel = context.WithTimeoutCause(ctx, be.cfg.AttemptTimeout, errAttemptTimeout)
		defer acancel()
	}
	err := dispatch(actx, be.impl, &r.batch, out)
	if err != nil && r.ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) {
		err = &UpstreamError{Class: ClassTimeout, Message: "upstream call timed out after " + be.cfg.AttemptTimeout.String(), Err: err}
	}
	w.stop()
	end := time.Now()
	elapsed := end.Sub(start)
	if r.span != nil {
		if err != nil {
			r.span.RecordError(err)
		}
		r.span.End(trace.WithTimestamp(end))
	}

	// Tell the budget and the breaker how it went.
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
		be.onRateLimited(limited)
	} else if err == nil {
		be.onSuccess(r.batch.RateLimit)
	}
	if r.ctx.Err() != nil && err != nil {
		r.pm.done(errUnused) // nobody awaited the answer: it says nothing of health
	} else {
		r.pm.done(err)
	}
	be.release(r.pm, used)

	for i, c := range live {
		if !c.pending() {
			continue
		}
		c.upstream += elapsed
		resp := &out[i]
		e := resp.Err
		if e == nil && err != nil && resp.Text == "" && resp.Embedding == nil {
			e = err
		}
		if e != nil && !end.Before(c.deadline) {
			e = ErrDeadline // the batch context ran out with the request's time
		}
		if e != nil && b.retryLater(c, r, e, end) {
			continue
		}
		res := Result{
			BatchID:   r.batch.ID,
			BatchSize: n,
			Attempts:  c.attempts,
			Backend:   be.name,
			Timings: Timings{
				BatchWait: c.batchedAt.Sub(c.admitted),
				Queued:    c.dispatchedAt.Sub(c.admitted),
				Upstream:  c.upstream,
			},
		}
		if e != nil {
			res.Err = e
		} else {
			res.Text, res.Embedding, res.FinishReason, res.Usage = resp.Text, resp.Embedding, resp.FinishReason, resp.Usage
		}
		c.finish(res, end)
	}
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

// dispatch calls the backend, turning a panic into an error so that one bad
// backend cannot take the service down.
func dispatch(ctx context.Context, be Backend, b *Batch, out []Response) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &UpstreamError{Class: ClassUnknown, Message: "backend failed", Err: fmt.Errorf("backend panic: %v", p)}
		}
	}()
	return be.Dispatch(ctx, b, out)
}

// deadlineWatch ends a dispatched batch's calls as their deadlines pass.
type deadlineWatch struct {
	calls   []*Call
	timer   *time.Timer
	mu      sync.Mutex // orders fire's re-arming against stop
	stopped bool
}

func (w *deadlineWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.mu.Unlock()
}

// last returns the latest deadline among the calls.
func (w *deadlineWatch) last() time.Time {
	var last time.Time
	for _, c := range w.calls {
		if c.deadline.After(last) {
			last = c.deadline
		}
	}
	return last
}

// next returns the earliest deadline among live calls, or a time far ahead.
func (w *deadlineWatch) next(now time.Time) time.Time {
	next := now.Add(time.Hour)
	for _, c := range w.calls {
		if c.pending() && c.deadline.Before(next) {
			next = c.deadline
		}
	}
	return next
}

func (w *deadlineWatch) fire() {
	now := time.Now()
	for _, c := range w.calls {
		if c.pending() && !c.deadline.After(now) {
			c.finish(Result{Err: ErrDeadline}, now)
		}
	}
	w.mu.Lock()
	if !w.stopped {
		w.timer.Reset(w.next(now).Sub(now))
	}
	w.mu.Unlock()
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
			attrBackend.String(r.lane.be.name),
		))
	r.span = span
	bsc := span.SpanContext()
	for _, c := range calls {
		if c.span != nil {
			c.span.AddLink(trace.Link{SpanContext: bsc, Attributes: []attribute.KeyValue{attrBatchID.String(r.batch.ID)}})
			c.span.SetAttributes(attrBatchID.String(r.batch.ID), attrBatchSize.Int(len(calls)))
		}
	}
	return ctx
}
