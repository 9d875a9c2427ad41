package batcher

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// backendState bounds one backend's concurrent dispatches and hands free
// slots to waiting lanes, best priority first.
type backendState struct {
	name  string
	impl  Backend
	limit int
	aging time.Duration

	mu       sync.Mutex
	inFlight int      // slots held, by runners or by lanes about to cut
	waiters  []waiter // lanes with a batch due and no slot
}

type waiter struct {
	l     *lane
	p     Priority
	since time.Time
}

// idle reports whether a dispatch could start now.
func (s *backendState) idle() bool {
	s.mu.Lock()
	ok := s.inFlight < s.limit && len(s.waiters) == 0
	s.mu.Unlock()
	return ok
}

// acquire takes a slot for l, or queues l to be granted one later with
// l.granted and a nudge. p and since describe l's best waiting call.
func (s *backendState) acquire(l *lane, p Priority, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight < s.limit && len(s.waiters) == 0 {
		s.inFlight++
		return true
	}
	for i := range s.waiters {
		if s.waiters[i].l == l {
			s.waiters[i].p, s.waiters[i].since = p, since
			return false
		}
	}
	s.waiters = append(s.waiters, waiter{l: l, p: p, since: since})
	return false
}

// unregister drops l from the waiters; a slot already granted stays granted.
func (s *backendState) unregister(l *lane) {
	s.mu.Lock()
	for i := range s.waiters {
		if s.waiters[i].l == l {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

// release frees a slot, handing it straight to the best waiting lane.
func (s *backendState) release() {
	s.mu.Lock()
	if len(s.waiters) == 0 {
		s.inFlight--
		s.mu.Unlock()
		return
	}
	now := time.Now()
	best := 0
	rank := func(w waiter) time.Duration { return time.Duration(w.p)*s.aging - now.Sub(w.since) }
	for i := 1; i < len(s.waiters); i++ {
		if rank(s.waiters[i]) < rank(s.waiters[best]) {
			best = i
		}
	}
	l := s.waiters[best].l
	s.waiters = append(s.waiters[:best], s.waiters[best+1:]...)
	s.mu.Unlock()
	l.granted.Store(true)
	l.nudge()
}

// batchRun is one dispatch of one batch. Its runner goroutine owns it; calls
// reach it only through forget. calls never changes once the run starts.
type batchRun struct {
	b      *Batcher
	lane   *lane
	batch  Batch
	calls  []*Call
	ctx    context.Context
	cancel context.CancelFunc
	live   atomic.Int32 // calls of this run not yet ended
	span   trace.Span
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
// caller holds l.mu and a dispatch slot, which the runner releases.
func (l *lane) startLocked(calls []*Call, now time.Time) {
	b := l.b
	id := "b" + strconv.FormatUint(b.batchSeq.Add(1), 36)
	r := &batchRun{
		b:    b,
		lane: l,
		batch: Batch{
			ID:        id,
			Route:     l.route.Name,
			Model:     l.route.Model,
			Op:        l.route.Op,
			MaxTokens: l.key.maxTokens,
		},
		calls: calls,
	}
	var last time.Time
	for _, c := range calls {
		if c.deadline.After(last) {
			last = c.deadline
		}
	}
	r.ctx, r.cancel = context.WithDeadline(context.Background(), last)
	b.track(r)
	b.wg.Add(1)
	go r.run(now)
}

// run dispatches the batch and delivers its results.
func (r *batchRun) run(formed time.Time) {
	b, be := r.b, r.lane.be
	defer b.wg.Done()
	defer be.release()
	defer b.untrack(r)
	defer r.cancel()

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
		c.emit(&Event{Kind: EventBatched, Time: formed, BatchID: r.batch.ID, BatchSize: n})
		c.emit(&Event{Kind: EventDispatched, Time: start, BatchID: r.batch.ID, Attempt: c.attempts, Backend: be.name})
	}

	// Deadlines keep firing while the upstream call runs.
	w := &deadlineWatch{calls: live}
	w.timer = time.AfterFunc(math.MaxInt64, w.fire)
	w.timer.Reset(w.next(start).Sub(start))

	out := make([]Response, n)
	err := dispatch(ctx, be.impl, &r.batch, out)
	w.stop()
	end := time.Now()
	elapsed := end.Sub(start)
	if r.span != nil {
		if err != nil {
			r.span.RecordError(err)
		}
		r.span.End(trace.WithTimestamp(end))
	}
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
		if e != nil && !end.Before(c.deadline) {
			e = ErrDeadline // the batch context ran out with the request's time
		}
		if e != nil {
			res.Err = e
		} else {
			res.Text, res.Embedding, res.FinishReason, res.Usage = resp.Text, resp.Embedding, resp.FinishReason, resp.Usage
		}
		c.finish(res, end)
	}
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
	stopped atomic.Bool
}

func (w *deadlineWatch) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
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
	if !w.stopped.Load() {
		w.timer.Reset(w.next(now).Sub(now))
	}
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
