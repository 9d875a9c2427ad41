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
	cfg *config
	// routes is replaced whole by SetRoutes (copy on write, under
	// routesMu); a Call keeps the routeConfig it was admitted with.
	routes   atomic.Pointer[map[string]*routeConfig]
	routesMu sync.Mutex
	// backends is replaced whole by Reconfigure (under routesMu), like
	// routes; a routeConfig points at the backendStates it was resolved
	// against.
	backends atomic.Pointer[backendSet]
	// allBackends is every backendState ever made, retired ones too: their
	// workers and timers stop at Shutdown. Under routesMu.
	allBackends []*backendState
	tracer      trace.Tracer // nil: no spans
	metrics     *metrics     // nil: no metrics

	// closing stops admission; with pending it fences Submit against
	// Shutdown (submit).
	closing atomic.Bool
	// testHookAdmit, when set, runs in submit after its first look at
	// closing, before the call is counted; testHookCounted once it is
	// counted and past the fence.
	testHookAdmit, testHookCounted func()
	// testHookClaimed, when set, runs as a batch run claims each call.
	testHookClaimed func(*Call)
	aborted         atomic.Bool // the drain deadline passed: whatever is pending ends

	lanesMu     sync.RWMutex
	lanes       map[laneKey]*lane
	laneHolders laneHolders // who created the lanes open, for the cap's fair share; under lanesMu

	dedup dedupTable
	admit *admission

	// tenants is the configured tenants (SetTenants), nil while off.
	tenants     atomic.Pointer[tenantTable]
	tenantsMu   sync.Mutex   // serializes SetTenants
	otherTenant *tenantState // every unconfigured tenant's requests

	runPool   sync.Pool // of *batchRun
	tokenPool sync.Pool // of chan struct{} (capacity 1): Do's done channels
	callPool  sync.Pool // of *Call: Do's calls that nothing holds any more (finishAs)

	runsMu sync.Mutex
	runs   map[*batchRun]struct{} // batches in flight

	pending   atomic.Int64 // admitted calls without a result
	batchSeq  atomic.Uint64
	viewKey   [16]byte      // keys tenantBatchID
	closed    chan struct{} // closed once admission has closed
	drained   chan struct{} // closed when closing and nothing is pending
	drainOnce sync.Once
	shutOnce  sync.Once
	lanesWG   sync.WaitGroup // lane owners
	fetches   sync.WaitGroup // lookups in the cache's shared layer (cacheFetch)
	workers   sync.WaitGroup // dispatch workers
	owners    sync.WaitGroup // backend owners (backendState.loop)
	abortOnce sync.Once
	abortCh   chan struct{} // closed when the drain is cut short
	stopped   chan struct{} // closed when every goroutine has returned
}

// New returns a Batcher for the given routes and backends. A bad option
// fails with an error that names the field.
func New(opts ...Option) (*Batcher, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Batcher{
		cfg:     cfg,
		lanes:   make(map[laneKey]*lane),
		runs:    make(map[*batchRun]struct{}),
		closed:  make(chan struct{}),
		drained: make(chan struct{}),
		abortCh: make(chan struct{}),
		admit:   newAdmission(cfg.queueCapacity, cfg.queueReserve),
		stopped: make(chan struct{}),
		viewKey: newViewKey(),
	}
	b.otherTenant = &tenantState{name: OtherTenant}
	b.otherTenant.lim.Store(&tenantLimits{weight: 1})
	set, _, errs := b.planBackends(cfg.backends)
	b.backends.Store(set)
	routes, rerrs := b.resolveRoutes(set, cfg.routes)
	errs = append(errs, rerrs...)
	b.routes.Store(&routes)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	b.commitBackends(set, nil)
	if cfg.tracerProvider != nil {
		b.tracer = cfg.tracerProvider.Tracer(tracerName)
	}
	if b.metrics, err = newMetrics(cfg.meterProvider, b); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return b, nil
}

// resolveRoutes checks and resolves routes against the backends in set.
func (b *Batcher) resolveRoutes(set *backendSet, rs []Route) (map[string]*routeConfig, []error) {
	var errs []error
	routes := make(map[string]*routeConfig, len(rs))
	for _, r := range rs {
		rc, err := resolveRoute(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := routes[rc.Name]; dup {
			errs = append(errs, fmt.Errorf("route %q: defined twice", rc.Name))
			continue
		}
		if err := set.resolveTargets(&rc); err != nil {
			errs = append(errs, err)
			continue
		}
		routes[rc.Name] = &rc
	}
	if len(errs) == 0 && len(routes) == 0 {
		errs = append(errs, errors.New("routes: at least one route is needed"))
	}
	return routes, errs
}

// SetRoutes replaces the routes while the Batcher runs: a route added is
// served at once, a route removed refuses new requests as an unknown
// model, and a route changed serves new requests with its new settings in
// lanes of its own. Requests admitted before keep the route they were
// admitted with, whatever happens to it, and finish on its old settings.
// The routes may use only the backends in force (New's, or
// Reconfigure's). A bad set (an error
// naming the route and field, joined) is refused whole and the old routes
// stay. After Shutdown began it returns ErrClosed.
func (b *Batcher) SetRoutes(routes ...Route) error {
	b.routesMu.Lock()
	defer b.routesMu.Unlock()
	if b.closing.Load() {
		return ErrClosed
	}
	next, errs := b.resolveRoutes(b.backends.Load(), routes)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if b.metrics != nil {
		b.metrics.addRoutes(next) // before the routes can be used
	}
	b.routes.Store(&next)
	return nil
}

// resolveTargets points a route at its backend and fallbacks.
func (set *backendSet) resolveTargets(rc *routeConfig) error {
	all := append([]Target{{Backend: rc.Backend, Model: rc.Model}}, rc.Fallbacks...)
	if len(all) > math.MaxUint8 {
		return fmt.Errorf("route %q fallbacks: at most %d, got %d", rc.Name, math.MaxUint8-1, len(rc.Fallbacks))
	}
	for i, t := range all {
		field := fmt.Sprintf("route %q backend", rc.Name)
		if i > 0 {
			field = fmt.Sprintf("route %q fallbacks[%d]", rc.Name, i-1)
		}
		be := set.byName[t.Backend]
		if be == nil {
			return fmt.Errorf("%s: no backend named %q", field, t.Backend)
		}
		model := t.Model
		if model == "" {
			model = rc.Name
		}
		shared := AllParams
		if ps, ok := be.cfg.Backend.(ParamSharer); ok {
			shared = ps.SharedParams(rc.Name, model, rc.Op) & AllParams
		}
		f := FeatureSeed // a plain parameter: honoured unless declared otherwise
		if fd, ok := be.cfg.Backend.(FeatureDeclarer); ok {
			f = fd.Features(rc.Name, model, rc.Op) & AllFeatures
		}
		if i == 0 {
			rc.features = f
		} else {
			rc.features &= f
		}
		rc.targets = append(rc.targets, target{be: be, model: model, shared: shared})
	}
	rc.hot = make([]atomic.Pointer[lane], len(rc.targets))
	return nil
}

// RouteInfo describes a configured route.
type RouteInfo struct {
	Name    string
	Op      Operation
	Backend string
	// DefaultMaxTokens is what a request that leaves max_tokens unset gets.
	DefaultMaxTokens int32
	// Features are what every target of the route honours beyond plain
	// text (FeatureDeclarer), which ValidateRich checks a request against.
	Features Features
}

// Routes lists the configured routes.
func (b *Batcher) Routes() []RouteInfo {
	routes := *b.routes.Load()
	out := make([]RouteInfo, 0, len(routes))
	for _, rc := range routes {
		out = append(out, RouteInfo{Name: rc.Name, Op: rc.Op, Backend: rc.Backend, DefaultMaxTokens: rc.DefaultMaxTokens, Features: rc.features})
	}
	return out
}

// Closed is closed once Shutdown has closed admission: Submit fails with
// ErrClosed from then on.
func (b *Batcher) Closed() <-chan struct{} { return b.closed }

// Pending returns how many admitted requests have no result yet.
func (b *Batcher) Pending() int { return int(b.pending.Load()) }

// AgingStep returns how long a waiting request takes to climb one priority
// (WithAgingStep).
func (b *Batcher) AgingStep() time.Duration { return b.cfg.agingStep }

// laneFor returns key's lane, creating it and its owner for req's caller if
// needed. It fails with a *LaneLimitError (ErrTooManyLanes) when the caller
// holds its fair share of lanes, or when a new lane would pass the cap and
// no idle lane can be evicted to make room (lanecap.go).
func (b *Batcher) laneFor(key laneKey, rc *routeConfig, req *Request) (*lane, error) {
	b.lanesMu.RLock()
	l := b.lanes[key]
	b.lanesMu.RUnlock()
	if l != nil {
		return l, nil
	}
	b.lanesMu.Lock()
	if l = b.lanes[key]; l != nil {
		b.lanesMu.Unlock()
		return l, nil
	}
	if b.aborted.Load() {
		// Shutdown may be past waiting for lane owners (it takes lanesMu
		// after aborting, so a lane made before is waited for).
		b.lanesMu.Unlock()
		return nil, ErrShutdown
	}
	caller := holderOf(req)
	if err := b.roomForLaneLocked(caller, time.Now()); err != nil {
		b.lanesMu.Unlock()
		return nil, err
	}
	l = newLane(b, key, rc)
	b.lanes[key] = l
	b.laneHolders.add(l, caller)
	b.lanesWG.Add(1)
	l.be.ensureOwner() // under lanesMu: Shutdown waits for what it starts (see Shutdown)
	b.lanesMu.Unlock()
	go l.loop() // outside the lock
	return l, nil
}

// callEnded books a call's terminal result in the admission count.
func (b *Batcher) callEnded() {
	if b.pending.Add(-1) == 0 && b.closing.Load() {
		b.drainOnce.Do(func() { close(b.drained) })
	}
}

func (b *Batcher) track(r *batchRun) {
	r.tracked = true
	b.runsMu.Lock()
	b.runs[r] = struct{}{}
	b.runsMu.Unlock()
}

// untrack takes r out of b.runs, once; only r's own goroutine calls it.
func (b *Batcher) untrack(r *batchRun) {
	if !r.tracked {
		return
	}
	r.tracked = false
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

// Flush sends every lane's queued requests now, without waiting out their
// windows, and waits until they have been sent (handed to their backend,
// still within its concurrency and rate limits) or have ended, or until
// ctx ends. Requests admitted after Flush began are not waited for. It
// returns ErrCanceled or ErrDeadline when ctx ended first; the flushed
// requests are still sent as soon as capacity allows.
func (b *Batcher) Flush(ctx context.Context) error {
	var waits []*flushWait
	b.eachLane(func(l *lane) {
		fw := newFlushWait(ctx, nil)
		waits = append(waits, fw)
		l.flush(fw)
	})
	return waitFlushed(ctx, waits)
}

// FlushCalls is Flush for the given calls only: each of them still queued
// goes out in its lane's next batch, ahead of everything else queued there,
// and the batch fills with other queued requests as usual, so that other
// callers' batches do not shrink. Calls in flight, waiting out a retry
// backoff or ended are not waited for. A server flushes one stream's
// requests this way.
//
// The flush is asked for before FlushCalls waits: with a ctx that is
// already done it returns at once, and the calls still leave.
func (b *Batcher) FlushCalls(ctx context.Context, calls ...*Call) error {
	byLane := make(map[*lane][]*Call)
	for _, c := range calls {
		if c == nil || !c.queued.Load() {
			continue
		}
		if l := c.lane.Load(); l != nil {
			byLane[l] = append(byLane[l], c)
		}
	}
	waits := make([]*flushWait, 0, len(byLane))
	for l, cs := range byLane {
		fw := newFlushWait(ctx, cs)
		waits = append(waits, fw)
		l.flush(fw)
	}
	return waitFlushed(ctx, waits)
}

// newFlushWait returns the flush of calls (nil: every queued call) for a
// waiter whose context is ctx. When ctx is already done nobody will wait:
// the flush moves its calls and is told of none of them leaving, so that
// a caller flushing again and again (a stream's Flush messages, which
// give their window token back at once) leaves no wait behind per queued
// call.
func newFlushWait(ctx context.Context, calls []*Call) *flushWait {
	fw := &flushWait{calls: calls, done: make(chan struct{}), unwaited: ctx.Err() != nil}
	fw.left.Store(1) // the lane's message holds one until it is handled
	return fw
}

func waitFlushed(ctx context.Context, waits []*flushWait) error {
	for _, fw := range waits {
		select {
		case <-fw.done:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
	return nil
}

// shutdownGrace is how long Shutdown waits, once its context has ended and
// every pending request has its result, for dispatches still in flight to
// return. Their contexts are cancelled then, and a Backend must return
// promptly on cancellation (its contract); one that does not is reported
// in Shutdown's error and left running rather than hang the caller.
const shutdownGrace = time.Second

// Shutdown stops admission, sends every partial batch at once and waits for
// every pending request until ctx ends. Requests still pending then end with
// ErrShutdown, and Shutdown returns an error wrapping ctx's. It returns once
// the batcher's goroutines have stopped (see shutdownGrace for a backend
// that ignores its context). Calling it again waits again.
func (b *Batcher) Shutdown(ctx context.Context) error {
	b.shutOnce.Do(func() {
		b.closing.Store(true) // see submit's fence
		close(b.closed)
		if b.pending.Load() == 0 {
			b.drainOnce.Do(func() { close(b.drained) })
		}
		b.eachLane((*lane).nudge)
		go func() {
			// Lane owners leave once they are idle; then nothing hands the
			// workers a batch any more.
			<-b.drainedOrAborted()
			// After an abort laneFor makes no lane; one it was making
			// holds lanesMu and is counted in lanesWG once this passes.
			b.lanesMu.Lock()
			b.lanesMu.Unlock() //nolint:staticcheck // an empty critical section on purpose: a barrier
			b.lanesWG.Wait()
			b.routesMu.Lock() // Reconfigure is refused from now on
			all := b.allBackends
			b.routesMu.Unlock()
			for _, be := range all {
				close(be.work)
			}
			b.workers.Wait()
			// The workers' releases and retries are in the owners'
			// inboxes: each owner applies them, then exits.
			for _, be := range all {
				be.stop()
			}
			b.owners.Wait()
			b.fetches.Wait()
			close(b.stopped)
		}()
	})
	var err error
	select {
	case <-b.drained:
	case <-ctx.Done():
		if n := b.abort(); n > 0 {
			err = fmt.Errorf("batcher: drain ended with %d requests pending, failed with ErrShutdown: %w", n, ctx.Err())
		}
	}
	if ctx.Err() == nil {
		select {
		case <-b.stopped:
			return err
		case <-ctx.Done():
			b.abort()
		}
	}
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case <-b.stopped:
		return err
	case <-grace.C:
		return errors.Join(err, fmt.Errorf("batcher: dispatches still running, a backend ignores its context: %w", ctx.Err()))
	}
}

// drainedOrAborted is closed once nothing is pending or the drain was cut
// short.
func (b *Batcher) drainedOrAborted() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		select {
		case <-b.drained:
		case <-b.abortCh:
		}
		close(ch)
	}()
	return ch
}

// abort ends every pending call with ErrShutdown and reports how many were
// pending. Queued calls are ended by their lanes' owners.
func (b *Batcher) abort() int {
	n := int(b.pending.Load())
	b.abortOnce.Do(func() {
		b.aborted.Store(true) // from now on, whatever moves ends instead
		close(b.abortCh)
	})
	var calls []*Call
	b.runsMu.Lock()
	for r := range b.runs {
		calls = append(calls, r.calls...)
	}
	b.runsMu.Unlock()
	now := time.Now()
	for _, c := range calls {
		c.finish(Result{Err: ErrShutdown}, now)
	}
	// The calls waiting out a retry backoff are their backends' owners':
	// each ends its own, and answers once it has.
	b.routesMu.Lock()
	all := b.allBackends
	b.routesMu.Unlock()
	for _, be := range all {
		done := make(chan struct{})
		be.send(bmsg{kind: bmAbort, done: done})
		<-done
	}
	b.eachLane((*lane).nudge)
	return n
}
