package batcher

import (
	"errors"
	"fmt"
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
	routes atomic.Pointer[map[string]*routeConfig]
	// routeHint spares most lookups in routes the map's hash (route).
	routeHint atomic.Pointer[routeHint]
	routesMu  sync.Mutex
	// backends is replaced whole by Reconfigure (under routesMu), like
	// routes; a routeConfig points at the backendStates it was resolved
	// against.
	backends atomic.Pointer[backendSet]
	// allBackends is every backendState ever made, retired ones too: their
	// workers and timers stop at Shutdown. Under routesMu.
	allBackends []*backendState
	tracer      trace.Tracer // nil: no spans
	clock       *clock       // the hot path's time (clock.go)
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
	// testHookWake, when set, runs as a batch run is about to wake its
	// plain callers, on the run's goroutine.
	testHookWake func()
	// testHookPushCounted, when set, runs in lane.push once the call is
	// counted (size, queuedBy), before the inbox's lock.
	testHookPushCounted func()

	aborted atomic.Bool // the drain deadline passed: whatever is pending ends

	lanesMu     sync.RWMutex
	lanes       map[laneKey]*lane
	laneHolders laneHolders // who created the lanes open, for the cap's fair share; under lanesMu

	dedup dedupTable
	admit *admission

	// tenants is the configured tenants (SetTenants), nil while off.
	tenants     atomic.Pointer[tenantTable]
	tenantsMu   sync.Mutex   // serializes SetTenants
	otherTenant *tenantState // every unconfigured tenant's requests

	runPool sync.Pool // of *batchRun
	// slotPool is Do's: a slot holds a done channel, room for a result
	// and a Call that nothing holds any more (finishAs), when Do had one.
	slotPool sync.Pool // of *doSlot

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
		clock:   newClock(),
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
	if b.metrics, err = newMetrics(cfg.meterProvider, cfg.metricsProducer, b); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return b, nil
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
func (b *Batcher) callEnded() { b.callsEnded(1) }

// callsEnded is callEnded for n calls at once.
func (b *Batcher) callsEnded(n int64) {
	if b.pending.Add(-n) == 0 && b.closing.Load() {
		b.drainOnce.Do(func() { close(b.drained) })
	}
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
