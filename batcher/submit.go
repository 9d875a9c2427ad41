package batcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batcherhq/batcher/internal/clip"
)

// Submit admits req and returns its Call, or fails at once: a
// *ValidationError (ErrInvalid) for bad input, ErrQueueFull when the queue is
// full, a *QuotaError (ErrQuotaExceeded) when the request's tenant is over
// a quota, ErrClosed after Shutdown began, or ErrCanceled / ErrDeadline when
// ctx is already done.
//
// The request's deadline is the earliest of ctx's deadline, req.Timeout and
// the queue timeout. ctx's span, if any, parents the request's span. Submit
// does not watch ctx for cancellation: call Call.Cancel, or use Do.
func (b *Batcher) Submit(ctx context.Context, req *Request) (*Call, error) {
	c, err := b.submit(ctx, req, nil)
	if b.metrics != nil {
		b.metrics.submitted(req, &c, &err)
	}
	return c, err
}

// TrySubmit is Submit for a caller that keeps a request the core cannot
// take now and offers it again later, as the jobs runner keeps its
// backlog. A refusal because the queue is full (ErrQueueFull) or a tenant
// quota is spent (ErrQuotaExceeded) is not a rejection: nothing was lost,
// so batcher.requests.rejected does not count it, and
// batcher.requests.deferred does. Every other outcome is Submit's.
func (b *Batcher) TrySubmit(ctx context.Context, req *Request) (*Call, error) {
	c, err := b.submit(ctx, req, nil)
	if b.metrics != nil {
		if errors.Is(err, ErrQueueFull) || errors.Is(err, ErrQuotaExceeded) {
			b.metrics.postponed(req, err)
		} else {
			b.metrics.submitted(req, &c, &err)
		}
	}
	return c, err
}

// submit is Submit. With a nil token the call's done channel is closed on
// its result, as Call.Done documents; Do passes a pooled channel of
// capacity 1 instead, which the result is sent on once and which Do, the
// only receiver, takes back for the next call.
func (b *Batcher) submit(ctx context.Context, req *Request, slot *doSlot) (*Call, error) {
	rc, err := b.routeFor(ctx, req)
	if err != nil {
		return nil, err
	}
	at := admittedAt{k: b.clock, m: b.clock.nowMono()}
	deadline := b.deadlineFor(ctx, req, &at)
	tg, err := b.firstTarget(rc)
	if err != nil {
		return nil, err
	}
	tokens := estimateTokens(req, rc)
	ts := b.tenantOf(req)
	hold, err := b.count(req, ts, &at, tokens)
	if err != nil {
		return nil, err
	}
	c := b.newCall(req, rc, ts, slot)
	c.target, c.admitted, c.deadline, c.tokens = uint8(tg), at.m, deadline, tokens
	if b.tracer != nil {
		c.span = b.startRequestSpan(ctx, req)
	}
	if err := b.place(c, &at, &hold); err != nil {
		return nil, err
	}
	return c, nil
}

// routeFor returns req's route once req is valid on it and ctx is live.
func (b *Batcher) routeFor(ctx context.Context, req *Request) (*routeConfig, error) {
	rc := b.route(req.Route)
	if rc == nil {
		if req.Route == "" {
			return nil, invalid("model", "must be set")
		}
		return nil, invalid("model", "unknown model %q", clip.String(req.Route))
	}
	if ve := validate(req, rc); ve != nil {
		return nil, rc.blame(req, ve)
	}
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	return rc, nil
}

// routeHint is the route the last lookup in a route table found first:
// most requests name one route, and a hit spares them the map's hash.
type routeHint struct {
	table *map[string]*routeConfig // the table it is valid for
	rc    *routeConfig
}

// route returns the route named name in the current table, or nil.
func (b *Batcher) route(name string) *routeConfig {
	table := b.routes.Load()
	h := b.routeHint.Load()
	if h != nil && h.table == table && h.rc.Name == name {
		return h.rc
	}
	rc := (*table)[name]
	if rc != nil && (h == nil || h.table != table) {
		// Set once per table, never replaced while it holds: requests
		// for several routes do not take turns writing it.
		b.routeHint.Store(&routeHint{table: table, rc: rc})
	}
	return rc
}

// deadlineFor returns the deadline of a call admitted at at: the
// earliest of the queue timeout, the request's timeout and ctx's
// deadline. It is computed in monos, as the call keeps it: only a ctx
// deadline is a time.Time to convert (monoAt).
func (b *Batcher) deadlineFor(ctx context.Context, req *Request, at *admittedAt) mono {
	nowM := at.m
	deadline := nowM.after(b.cfg.queueTimeout)
	if req.Timeout > 0 {
		deadline = min(deadline, nowM.after(req.Timeout))
	}
	if d, ok := ctx.Deadline(); ok {
		deadline = min(deadline, monoAt(d, nowM, at.time()))
	}
	return deadline
}

// firstTarget returns the first of rc's targets whose breaker lets
// requests in, unless the Batcher is closing.
func (b *Batcher) firstTarget(rc *routeConfig) (int, error) {
	if b.closing.Load() {
		return 0, ErrClosed
	}
	for i, t := range rc.targets {
		if !t.be.open() {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: circuit open on every backend of model %q", ErrNoBackend, rc.Name)
}

// count admits a request to its tenant's quotas and then to the shared
// queue, and returns what it took of the quotas. A refusal takes nothing.
func (b *Batcher) count(req *Request, ts *tenantState, at *admittedAt, tokens int) (tenantHold, error) {
	// The tenant's quotas before the shared queue: a tenant over its own
	// limits takes no place there (and evicts nobody).
	var hold tenantHold
	var now time.Time // only a tenant's hold reads it (undo ignores an empty hold)
	if ts != nil {
		now = at.time()
		var err error
		if hold, err = ts.admit(now, tokens); err != nil {
			return tenantHold{}, err
		}
	}
	if h := b.testHookAdmit; h != nil {
		h()
	}
	n := b.pending.Add(1)
	// The fence against Shutdown, which sets closing and then reads
	// pending (both sequentially consistent): either Shutdown sees this
	// call counted and waits for it, or the call sees closing and leaves,
	// its count given back through callEnded, which ends the drain if it
	// was the last. A shared lock held across admission did this at the
	// cost of two writes to one cache line per request.
	if b.closing.Load() {
		b.callEnded()
		hold.undo(now)
		return tenantHold{}, ErrClosed
	}
	if h := b.testHookCounted; h != nil {
		h()
	}
	if n > b.admit.limitFor(req.Priority) {
		// URGENT work finding the queue full takes the place of the newest
		// queued DEFERRABLE or LOW request, which ends with ErrEvicted.
		if req.Priority != PriorityUrgent || n <= b.admit.capacity || !b.admit.evict() {
			b.callEnded()
			hold.undo(now)
			return tenantHold{}, ErrQueueFull
		}
	}
	return hold, nil
}

// newCall returns a Call for req, reusing one of Do's when slot is set.
func (b *Batcher) newCall(req *Request, rc *routeConfig, ts *tenantState, slot *doSlot) *Call {
	var c *Call
	var done chan struct{}
	var result *Result
	if slot != nil { // Do's: it may be one that Do gave back with the slot
		done, result = slot.token, &slot.res
		c, slot.call = slot.call, nil
	}
	slotted := false
	if c == nil && req.Sink != nil {
		if h, ok := req.Sink.(CallHolder); ok {
			c, slotted = h.CallSlot(), true
		}
	}
	if c == nil {
		c = new(Call)
	}
	*c = Call{
		req:      req,
		b:        b,
		rc:       rc,
		tenant:   ts,
		heapIdx:  -1,
		done:     done,
		result:   result,
		token:    slot != nil,
		prio:     req.Priority,
		hasSink:  req.Sink != nil,
		progress: req.Sink != nil && wantsProgress(req.Sink),
		named:    req.Tenant != "",
		slotted:  slotted,
	}
	if req.Sink != nil && slot == nil {
		if h, ok := req.Sink.(ResultHolder); ok {
			c.result = h.ResultSlot()
		}
	}
	if req.Stream {
		c.stream = newStreamState(c)
	}
	return c
}

// place takes an admitted call the rest of its way in: it is served from
// the cache, joins an identical call in flight, or is queued in its lane.
// An error means it was not admitted after all.
func (b *Batcher) place(c *Call, at *admittedAt, hold *tenantHold) error {
	req, rc := c.req, c.rc
	if lookup, store := b.cacheWanted(req, rc); store && b.cacheAdmit(c, lookup, at.time(), hold) {
		return nil // served from the cache, or being looked up in its shared layer
	}
	hot := &rc.hot[c.target]
	l := hot.Load()
	if l == nil || !l.key.is(req, rc, c.target) {
		var err error
		if l, err = b.laneFor(keyOf(req, rc, c.target), rc, req); err != nil {
			b.callEnded() // not admitted
			hold.undo(at.time())
			if c.span != nil {
				c.span.End()
			}
			return err
		}
		hot.Store(l)
	}
	if c.tenant != nil {
		c.tenant.admitted.Add(1)
	}
	if c.progress { // checked here: building the Event costs even when emit drops it
		c.emit(Event{Kind: EventQueued, Time: at.time(), Lane: l.name})
	}
	// Identical means every parameter equal, also those the lane ignores.
	if !req.Stream && dedupable(req) {
		if b.dedup.join(c, keyWith(req, rc, c.target, AllParams)) {
			rc.targets[c.target].be.stats.dedupHits.Add(1)
			return nil
		}
		if c.cache != nil && b.cacheLeads(c, at.time(), hold) {
			return nil // an identical leader stored its answer since the lookup
		}
	}
	b.admit.track(c)
	if !l.push(c) {
		hot.CompareAndSwap(l, nil) // closed: the next Submit looks it up
		b.enqueue(c)
	}
	return nil
}

// enqueue puts c in the lane of its route target.
func (b *Batcher) enqueue(c *Call) {
	if b.aborted.Load() {
		c.finish(Result{Err: ErrShutdown}, time.Now())
		return
	}
	key := keyOf(c.req, c.rc, c.target)
	for {
		l, err := b.laneFor(key, c.rc, c.req)
		if err != nil {
			c.finish(Result{Err: err}, time.Now())
			return
		}
		if l.push(c) {
			return
		}
	}
}

// Do submits req and waits for its result. When ctx ends first, the request
// ends with ErrCanceled or ErrDeadline. The error is the result's Err.
func (b *Batcher) Do(ctx context.Context, req *Request) (res Result, err error) {
	if req.Stream {
		err := invalid("stream", "Do returns the whole answer: submit a streamed request with Submit and read its deltas")
		return Result{Err: err}, err
	}
	slot, _ := b.slotPool.Get().(*doSlot)
	if slot == nil {
		slot = &doSlot{token: make(chan struct{}, 1)}
	}
	c, err := b.submit(ctx, req, slot)
	if b.metrics != nil {
		b.metrics.submitted(req, &c, &err)
	}
	if err != nil {
		b.slotPool.Put(slot)
		return Result{Err: err}, err
	}
	if done := ctx.Done(); done == nil {
		<-slot.token // a plain receive: cheaper than a select
	} else {
		select {
		case <-slot.token:
		case <-done:
			c.finish(Result{Err: ctxErr(ctx)}, time.Now())
			<-slot.token
		}
	}
	// finish wrote the result into the slot and then sent the one token;
	// nobody else receives on it, so it is empty and free again, and
	// nobody else reads the slot's result (finishAs).
	// Straight into the named result: a Result is 30 words, and each
	// copy of it costs.
	res = slot.res
	if c.recycle {
		*c = Call{}
		slot.call = c // the next Do that takes the slot takes the call
	}
	b.slotPool.Put(slot) // its last result stays until reused, or the pool drops it
	err = res.Err
	return
}

// ctxErr translates ctx's error into the batcher's sentinels.
func ctxErr(ctx context.Context) error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return ErrDeadline
	default:
		return ErrCanceled
	}
}

// estimateTokens guesses a request's cost before the upstream counts it.
func estimateTokens(r *Request, rc *routeConfig) int {
	return r.EstimatedTokens(rc.DefaultMaxTokens)
}

// EstimatedTokens guesses r's cost before the upstream counts it, as the
// backends' TPM limits do: about four bytes a token of input, plus the
// tokens it may generate (its max_tokens, or defaultMaxTokens when unset)
// for each of its choices (Params.Rich.N): a provider bills every choice.
// The budgets and quotas charged the estimate settle it against the usage
// the reply reports, both ways (bucket.refund, tenantState.ended).
func (r *Request) EstimatedTokens(defaultMaxTokens int32) int {
	n := r.Input.Size()/4 + 1
	// richTokens counts tools, a schema and images, so it is 0 without
	// them: a plain completion or embedding does not ask Rich.
	if (r.Chat != nil || len(r.Input.Messages) > 0) && r.Rich() {
		n += r.richTokens()
	}
	if r.Input.Op != OpEmbedding {
		mt := r.Params.MaxTokens
		if mt == 0 {
			mt = defaultMaxTokens
		}
		n += int(mt) * int(max(r.Params.rich().N, 1))
	}
	return n
}
