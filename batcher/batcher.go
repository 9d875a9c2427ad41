package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Batcher groups requests into batches and dispatches them. It is safe for
// concurrent use.
type Batcher struct {
	cfg         *config
	routes      map[string]*routeConfig
	backends    map[string]*backendState
	backendList []*backendState // in configuration order
	tracer      trace.Tracer    // nil: no spans

	// admitMu orders admission against shutdown: Submit holds it shared
	// while it admits, Shutdown exclusively while it closes admission.
	admitMu sync.RWMutex
	closing atomic.Bool
	aborted atomic.Bool // the drain deadline passed: whatever is pending ends

	lanesMu sync.RWMutex
	lanes   map[laneKey]*lane

	dedup dedupTable

	runsMu   sync.Mutex
	runs     map[*batchRun]struct{} // batches in flight
	retrying map[*Call]*time.Timer  // calls waiting out a backoff

	pending   atomic.Int64 // admitted calls without a result
	batchSeq  atomic.Uint64
	closed    chan struct{} // closed once admission has closed
	drained   chan struct{} // closed when closing and nothing is pending
	drainOnce sync.Once
	shutOnce  sync.Once
	wg        sync.WaitGroup // lane owners and batch runners
}

// New returns a Batcher for the given routes and backends. A bad option
// fails with an error that names the field.
func New(opts ...Option) (*Batcher, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Batcher{
		cfg:      cfg,
		routes:   make(map[string]*routeConfig),
		backends: make(map[string]*backendState),
		lanes:    make(map[laneKey]*lane),
		runs:     make(map[*batchRun]struct{}),
		retrying: make(map[*Call]*time.Timer),
		closed:   make(chan struct{}),
		drained:  make(chan struct{}),
	}
	var errs []error
	for _, bc := range cfg.backends {
		bc, err := resolveBackend(bc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := b.backends[bc.Name]; dup {
			errs = append(errs, fmt.Errorf("backend %q: defined twice", bc.Name))
			continue
		}
		be := newBackendState(bc, cfg.agingStep)
		b.backends[bc.Name] = be
		b.backendList = append(b.backendList, be)
	}
	for _, r := range cfg.routes {
		rc, err := resolveRoute(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := b.routes[rc.Name]; dup {
			errs = append(errs, fmt.Errorf("route %q: defined twice", rc.Name))
			continue
		}
		if err := b.resolveTargets(&rc); err != nil {
			errs = append(errs, err)
			continue
		}
		b.routes[rc.Name] = &rc
	}
	if len(errs) == 0 && len(b.routes) == 0 {
		errs = append(errs, errors.New("routes: at least one route is needed"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.tracerProvider != nil {
		b.tracer = cfg.tracerProvider.Tracer(tracerName)
	}
	return b, nil
}

// resolveTargets points a route at its backend and fallbacks.
func (b *Batcher) resolveTargets(rc *routeConfig) error {
	all := append([]Target{{Backend: rc.Backend, Model: rc.Model}}, rc.Fallbacks...)
	if len(all) > math.MaxUint8 {
		return fmt.Errorf("route %q fallbacks: at most %d, got %d", rc.Name, math.MaxUint8-1, len(rc.Fallbacks))
	}
	for i, t := range all {
		field := fmt.Sprintf("route %q backend", rc.Name)
		if i > 0 {
			field = fmt.Sprintf("route %q fallbacks[%d]", rc.Name, i-1)
		}
		be := b.backends[t.Backend]
		if be == nil {
			return fmt.Errorf("%s: no backend named %q", field, t.Backend)
		}
		model := t.Model
		if model == "" {
			model = rc.Name
		}
		rc.targets = append(rc.targets, target{be: be, model: model})
	}
	return nil
}

// RouteInfo describes a configured route.
type RouteInfo struct {
	Name    string
	Op      Operation
	Backend string
}

// Routes lists the configured routes.
func (b *Batcher) Routes() []RouteInfo {
	out := make([]RouteInfo, 0, len(b.routes))
	for _, rc := range b.routes {
		out = append(out, RouteInfo{Name: rc.Name, Op: rc.Op, Backend: rc.Backend})
	}
	return out
}

// Closed is closed once Shutdown has closed admission: Submit fails with
// ErrClosed from then on.
func (b *Batcher) Closed() <-chan struct{} { return b.closed }

// Pending returns how many admitted requests have no result yet.
func (b *Batcher) Pending() int { return int(b.pending.Load()) }

// Submit admits req and returns its Call, or fails at once: a
// *ValidationError (ErrInvalid) for bad input, ErrQueueFull when the queue is
// full, ErrClosed after Shutdown began, or ErrCanceled / ErrDeadline when ctx
// is already done.
//
// The request's deadline is the earliest of ctx's deadline, req.Timeout and
// the queue timeout. ctx's span, if any, parents the request's span. Submit
// does not watch ctx for cancellation: call Call.Cancel, or use Do.
func (b *Batcher) Submit(ctx context.Context, req *Request) (*Call, error) {
	rc := b.routes[req.Route]
	if rc == nil {
		if req.Route == "" {
			return nil, invalid("model", "must be set")
		}
		return nil, invalid("model", "unknown model %q", truncate(req.Route))
	}
	if err := validate(req, rc); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	deadline := now.Add(b.cfg.queueTimeout)
	if req.Timeout > 0 {
		if d := now.Add(req.Timeout); d.Before(deadline) {
			deadline = d
		}
	}
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}

	b.admitMu.RLock()
	defer b.admitMu.RUnlock()
	if b.closing.Load() {
		return nil, ErrClosed
	}
	tg := -1
	for i, t := range rc.targets {
		if !t.be.open() {
			tg = i
			break
		}
	}
	if tg < 0 {
		return nil, fmt.Errorf("%w: circuit open on every backend of model %q", ErrNoBackend, rc.Name)
	}
	if b.pending.Add(1) > int64(b.cfg.queueCapacity) {
		b.pending.Add(-1)
		return nil, ErrQueueFull
	}
	c := &Call{
		req:      req,
		b:        b,
		rc:       rc,
		target:   uint8(tg),
		admitted: now,
		deadline: deadline,
		due:      now.Add(rc.delays[req.Priority]),
		tokens:   estimateTokens(req, rc),
		heapIdx:  -1,
		done:     make(chan struct{}),
	}
	if b.tracer != nil {
		c.span = b.startRequestSpan(ctx, req)
	}
	key := keyOf(req, rc, c.target)
	l := b.laneFor(key, rc)
	if req.Sink != nil {
		c.emit(&Event{Kind: EventQueued, Time: now, Lane: l.name})
	}
	if dedupable(req) && b.dedup.join(c, key) {
		rc.targets[c.target].be.stats.dedupHits.Add(1)
		return c, nil
	}
	if !l.push(c) {
		b.enqueue(c)
	}
	return c, nil
}

// enqueue puts c in the lane of its route target.
func (b *Batcher) enqueue(c *Call) {
	if b.aborted.Load() {
		c.finish(Result{Err: ErrShutdown}, time.Now())
		return
	}
	key := keyOf(c.req, c.rc, c.target)
	for !b.laneFor(key, c.rc).push(c) {
	}
}

// retryLater sends c back to its lane after a backoff, if the policy, the
// retry budget and c's deadline allow; r is the run c failed in.
func (b *Batcher) retryLater(c *Call, r *batchRun, err error, now time.Time) bool {
	be := r.be
	p := &be.cfg.Retry
	class := classify(err)
	if !retryable(class, c.unknownRetries) || c.retries >= p.MaxRetries {
		return false
	}
	delay := max(p.backoff(c.retries), retryAfter(err))
	if !now.Add(delay).Before(c.deadline) || !be.retry.allow(now) {
		return false
	}
	if !c.run.CompareAndSwap(r, nil) {
		return false // it ended meanwhile
	}
	c.retries++
	if class == ClassUnknown {
		c.unknownRetries++
	}
	be.stats.retries[class].Add(1)
	c.emit(&Event{Kind: EventRetrying, Time: now, Attempt: c.attempts, Delay: delay, Class: class, Err: err})
	b.runsMu.Lock()
	b.retrying[c] = time.AfterFunc(delay, func() { b.requeue(c) })
	b.runsMu.Unlock()
	return true
}

// requeue ends c's backoff.
func (b *Batcher) requeue(c *Call) {
	b.runsMu.Lock()
	delete(b.retrying, c)
	b.runsMu.Unlock()
	if c.pending() {
		b.enqueue(c)
	}
}

// Do submits req and waits for its result. When ctx ends first, the request
// ends with ErrCanceled or ErrDeadline. The error is the result's Err.
func (b *Batcher) Do(ctx context.Context, req *Request) (Result, error) {
	c, err := b.Submit(ctx, req)
	if err != nil {
		return Result{Err: err}, err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		c.finish(Result{Err: ctxErr(ctx)}, time.Now())
		<-c.done
	}
	return c.result, c.result.Err
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

// estimateTokens guesses a request's cost before the upstream counts it:
// about four bytes a token, plus the tokens it may generate.
func estimateTokens(r *Request, rc *routeConfig) int {
	n := r.Input.Size()/4 + 1
	if rc.Op != OpEmbedding {
		mt := r.Params.MaxTokens
		if mt == 0 {
			mt = rc.DefaultMaxTokens
		}
		n += int(mt)
	}
	return n
}

// laneFor returns key's lane, creating it and its owner if needed.
func (b *Batcher) laneFor(key laneKey, rc *routeConfig) *lane {
	b.lanesMu.RLock()
	l := b.lanes[key]
	b.lanesMu.RUnlock()
	if l != nil {
		return l
	}
	b.lanesMu.Lock()
	defer b.lanesMu.Unlock()
	if l = b.lanes[key]; l == nil {
		l = newLane(b, key, rc)
		b.lanes[key] = l
		b.wg.Add(1)
		go l.loop()
	}
	return l
}

// reclaim removes an empty lane. It reports false when the lane got work in
// the meantime.
func (b *Batcher) reclaim(l *lane) bool {
	b.lanesMu.Lock()
	defer b.lanesMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		return false
	}
	l.be.unregister(l)
	if pm := l.granted.Swap(nil); pm != nil {
		l.be.giveBack(pm)
	}
	l.closed = true
	l.gone.Store(true)
	if b.lanes[l.key] == l {
		delete(b.lanes, l.key)
	}
	return true
}

// release books a call's end.
func (b *Batcher) release() {
	if b.pending.Add(-1) == 0 && b.closing.Load() {
		b.drainOnce.Do(func() { close(b.drained) })
	}
}

func (b *Batcher) track(r *batchRun) {
	b.runsMu.Lock()
	b.runs[r] = struct{}{}
	b.runsMu.Unlock()
}

func (b *Batcher) untrack(r *batchRun) {
	b.runsMu.Lock()
	delete(b.runs, r)
	b.runsMu.Unlock()
}

// eachLane calls f for every lane.
func (b *Batcher) eachLane(f func(*lane)) {
	b.lanesMu.RLock()
	ls := make([]*lane, 0, len(b.lanes))
	for _, l := range b.lanes {
		ls = append(ls, l)
	}
	b.lanesMu.RUnlock()
	for _, l := range ls {
		f(l)
	}
}

// Flush sends every lane's partial batch now, without waiting out windows.
// Batches still wait for dispatch capacity.
func (b *Batcher) Flush() {
	b.eachLane(func(l *lane) {
		l.mu.Lock()
		l.flush = true
		l.mu.Unlock()
		l.nudge()
	})
}

// Shutdown stops admission, sends every partial batch at once and waits for
// every pending request until ctx ends. Requests still pending then end with
// ErrShutdown, and Shutdown returns an error wrapping ctx's. It returns once
// the batcher's goroutines have stopped. Calling it again waits again.
func (b *Batcher) Shutdown(ctx context.Context) error {
	b.shutOnce.Do(func() {
		b.admitMu.Lock()
		b.closing.Store(true)
		b.admitMu.Unlock()
		close(b.closed)
		if b.pending.Load() == 0 {
			b.drainOnce.Do(func() { close(b.drained) })
		}
		b.eachLane((*lane).nudge)
	})
	var err error
	select {
	case <-b.drained:
	case <-ctx.Done():
		if n := b.abort(); n > 0 {
			err = fmt.Errorf("batcher: drain ended with %d requests pending, failed with ErrShutdown: %w", n, ctx.Err())
		}
	}
	stopped := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(stopped)
	}()
	if ctx.Err() == nil {
		select {
		case <-stopped:
			return err
		case <-ctx.Done():
		}
	}
	// ctx is done, and with it every batch's context: give the runners a
	// moment to return.
	grace := time.NewTimer(time.Second)
	defer grace.Stop()
	select {
	case <-stopped:
		return err
	case <-grace.C:
		return errors.Join(err, fmt.Errorf("batcher: dispatches still running, a backend ignores its context: %w", ctx.Err()))
	}
}

// abort ends every pending call with ErrShutdown and reports how many.
func (b *Batcher) abort() int {
	b.aborted.Store(true) // from now on, whatever moves ends instead
	var calls []*Call
	b.eachLane(func(l *lane) {
		l.mu.Lock()
		calls = append(calls, l.heap...)
		l.mu.Unlock()
	})
	b.runsMu.Lock()
	for r := range b.runs {
		calls = append(calls, r.calls...)
	}
	for c, t := range b.retrying {
		t.Stop()
		calls = append(calls, c)
		delete(b.retrying, c)
	}
	b.runsMu.Unlock()
	now := time.Now()
	n := 0
	for _, c := range calls {
		if c.finish(Result{Err: ErrShutdown}, now) {
			n++
		}
	}
	b.eachLane((*lane).nudge)
	return n
}
