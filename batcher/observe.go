package batcher

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// observables are the core's observable instruments: one callback reads
// Lanes, Stats and the counters of metrics and the tenants once per
// collection, at no cost on the hot path.
type observables struct {
	admitted, completed                   metric.Int64ObservableCounter // by route, priority (and outcome)
	depth, lanes, laneFlight              metric.Int64ObservableGauge   // by route and backend (and priority)
	pending, capacity                     metric.Int64ObservableGauge
	upReqs, saved, limited, retries       metric.Int64ObservableCounter // by backend (and error class)
	fallbacks, dedup, waits, budgetFails  metric.Int64ObservableCounter
	transitions                           metric.Int64ObservableCounter
	breaker, inFlight, concLimit, concMax metric.Int64ObservableGauge
	rpm, tpm                              metric.Float64ObservableGauge
	rpmMax, tpmMax                        metric.Int64ObservableGauge
	tAdmitted, tCompleted, tRejected      metric.Int64ObservableCounter // by tenant
	tPending                              metric.Int64ObservableGauge
	upCalls, budgetReq, budgetTok         metric.Int64ObservableCounter // by backend (and outcome)

	// backendOpts holds the backends' attribute sets, made once per name
	// (Reconfigure may add names); callbacks may run concurrently for
	// several readers.
	backendOpts sync.Map // name → metric.ObserveOption
}

// observe registers the observable instruments and their callback.
func (m *metrics) observe(mt metric.Meter, b *Batcher) error {
	ob, err := newObservables(mt)
	if err != nil {
		return err
	}
	capN := int64(b.cfg.queueCapacity)
	reg, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ob.observeLanes(o, b)
		ob.observeRoutes(o, m)
		ob.observeUpstream(o, m)
		o.ObserveInt64(ob.pending, int64(b.Pending()))
		ob.observeTenants(o, b)
		o.ObserveInt64(ob.capacity, capN)
		for _, st := range b.Stats() {
			ob.observeBackend(o, b, &st)
		}
		return nil
	}, ob.all()...)
	m.reg = reg
	return err
}

// newObservables creates the observable instruments on mt.
func newObservables(mt metric.Meter) (*observables, error) {
	var errs []error
	ogauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := mt.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	fgauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, err := mt.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	ocounter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := mt.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	ob := &observables{}
	ob.admitted = ocounter("batcher.requests.admitted", "{request}", "Requests admitted, by route and priority.")
	ob.completed = ocounter("batcher.requests.completed", "{request}", "Requests ended, by route, priority and outcome (ok, or why not).")
	ob.depth = ogauge("batcher.queue.depth", "{request}", "Requests queued in lanes, by route, backend and priority.")
	ob.lanes = ogauge("batcher.lanes", "{lane}", "Live lanes, by route and backend.")
	ob.laneFlight = ogauge("batcher.requests.in_flight", "{request}", "Requests in batches in flight upstream, by route and backend.")
	ob.pending = ogauge("batcher.queue.pending", "{request}", "Admitted requests without a result (queued, in flight or waiting to retry).")
	ob.capacity = ogauge("batcher.queue.capacity", "{request}", "The queue capacity: admission refuses past it.")
	ob.upReqs = ocounter("batcher.upstream.requests", "{request}", "Requests carried by upstream calls, by backend.")
	ob.saved = ocounter("batcher.upstream.calls_saved", "{call}", "Upstream calls saved by batching and dedup: requests carried minus calls made, plus dedup hits.")
	ob.limited = ocounter("batcher.upstream.rate_limited", "{response}", "429s (rate-limit errors) seen upstream, by backend.")
	ob.retries = ocounter("batcher.retries", "{request}", "Requests retried, by backend and error class.")
	ob.fallbacks = ocounter("batcher.fallbacks", "{request}", "Requests moved from a backend to its route's fallback.")
	ob.dedup = ocounter("batcher.dedup.hits", "{request}", "Requests that shared another's upstream call, by backend.")
	ob.waits = ocounter("batcher.budget.waits", "{wait}", "Times a due batch had to wait, by backend and budget (concurrency, rpm, tpm, rate_limit_pause).")
	ob.budgetFails = ocounter("batcher.budget.failures", "{request}", "Requests failed early: the backend's budget could not meet their deadline.")
	ob.transitions = ocounter("batcher.breaker.transitions", "{transition}", "Breaker state changes, by backend and the state entered.")
	ob.breaker = ogauge("batcher.breaker.state", "{state}", "1 for the breaker's current state (closed, open, half_open) per backend, 0 for the others.")
	ob.inFlight = ogauge("batcher.backend.in_flight", "{call}", "Upstream calls in flight, by backend.")
	ob.concLimit = ogauge("batcher.backend.concurrency.limit", "{call}", "The backend's current (adaptive) concurrency limit.")
	ob.concMax = ogauge("batcher.backend.concurrency.max", "{call}", "The backend's configured concurrency limit.")
	ob.rpm = fgauge("batcher.backend.rpm.limit", "{request}/min", "The backend's current (adaptive, AIMD) requests-per-minute rate; absent without an RPM budget.")
	ob.tpm = fgauge("batcher.backend.tpm.limit", "{token}/min", "The backend's current (adaptive, AIMD) tokens-per-minute rate; absent without a TPM budget.")
	ob.rpmMax = ogauge("batcher.backend.rpm.max", "{request}/min", "The backend's configured RPM; absent without an RPM budget.")
	ob.tpmMax = ogauge("batcher.backend.tpm.max", "{token}/min", "The backend's configured TPM; absent without a TPM budget.")
	// Per tenant: observed from the tenants' counters, and only while
	// tenants are set. The label is a configured tenant's name or
	// OtherTenant, so the series stay bounded by the configuration.
	ob.tAdmitted = ocounter("batcher.tenant.requests.admitted", "{request}", "Requests admitted, by tenant.")
	ob.tCompleted = ocounter("batcher.tenant.requests.completed", "{request}", "Requests ended, by tenant and outcome.")
	ob.tRejected = ocounter("batcher.tenant.quota.rejected", "{request}", "Requests refused by a tenant quota, by tenant and quota (rpm, tpm, queue_share, in_flight).")
	ob.upCalls = ocounter("batcher.upstream.calls", "{call}", "Upstream calls (HTTP requests: one per batch, per request of a fan-out, per pack), by backend and outcome.")
	ob.budgetReq = ocounter("batcher.budget.requests.used", "{request}", "Upstream requests spent against the backend's RPM budget.")
	ob.budgetTok = ocounter("batcher.budget.tokens.used", "{token}", "Tokens spent against the backend's TPM budget (reported usage, else the reservation).")
	ob.tPending = ogauge("batcher.tenant.requests.pending", "{request}", "Admitted requests without a result, by tenant.")
	return ob, errors.Join(errs...)
}

// all lists the instruments, for RegisterCallback.
func (ob *observables) all() []metric.Observable {
	return []metric.Observable{
		ob.admitted, ob.completed, ob.depth, ob.lanes, ob.laneFlight, ob.pending, ob.capacity,
		ob.upReqs, ob.saved, ob.limited, ob.retries, ob.fallbacks, ob.dedup, ob.waits,
		ob.budgetFails, ob.transitions, ob.breaker, ob.inFlight, ob.concLimit, ob.concMax,
		ob.rpm, ob.tpm, ob.rpmMax, ob.tpmMax,
		ob.tAdmitted, ob.tCompleted, ob.tRejected, ob.tPending,
		ob.upCalls, ob.budgetReq, ob.budgetTok,
	}
}

// observeLanes observes the lanes: their number, the requests they have
// in flight and their queue depths, by route and backend. Every configured
// route, backend and priority is observed, zeros too, so that a series
// does not vanish when its lanes go idle.
func (ob *observables) observeLanes(o metric.Observer, b *Batcher) {
	type lk struct {
		route, backend string
		prio           string
	}
	depths := map[lk]int64{}
	type rb struct{ route, backend string }
	counts := map[rb]int64{}
	flights := map[rb]int64{}
	for _, l := range b.Lanes() {
		k := rb{l.Route, l.Backend}
		counts[k]++
		flights[k] += int64(l.InFlight)
		for p, n := range l.Queued {
			depths[lk{l.Route, l.Backend, p}] += int64(n)
		}
	}
	for _, rc := range *b.routes.Load() {
		for _, t := range rc.targets {
			k := rb{rc.Name, t.be.name}
			attrs := []attribute.KeyValue{keyRoute.String(rc.Name), keyBackend.String(t.be.name)}
			o.ObserveInt64(ob.lanes, counts[k], metric.WithAttributes(attrs...))
			o.ObserveInt64(ob.laneFlight, flights[k], metric.WithAttributes(attrs...))
			for p := range numPriorities {
				name := Priority(p).String()
				o.ObserveInt64(ob.depth, depths[lk{rc.Name, t.be.name, name}],
					metric.WithAttributes(append(attrs[:2:2], keyPriority.String(name))...))
			}
		}
	}
}

// observeRoutes observes the routes' admitted and completed counts.
func (ob *observables) observeRoutes(o metric.Observer, m *metrics) {
	for _, rm := range *m.routes.Load() {
		for p := range numPriorities {
			o.ObserveInt64(ob.admitted, rm.admitted[p].Load(), rm.byPrio[p])
			for oc := range numOutcomes {
				if n := rm.completedCount(p, oc); n > 0 || oc == outcomeOK {
					o.ObserveInt64(ob.completed, n, rm.done[p][oc])
				}
			}
		}
	}
}

// observeUpstream observes the backends' upstream call and budget
// counts (upstreamCounts): the series the synchronous counters they
// replace would have.
func (ob *observables) observeUpstream(o metric.Observer, m *metrics) {
	for _, up := range *m.upstream.Load() {
		for oc := range numOutcomes {
			if n := up.calls[oc].Load(); n > 0 {
				o.ObserveInt64(ob.upCalls, n, up.callOpt[oc])
			}
		}
		if up.budgetSeen.Load() {
			o.ObserveInt64(ob.budgetReq, up.budgetReq.Load(), up.budgetOpt)
			o.ObserveInt64(ob.budgetTok, up.budgetTok.Load(), up.budgetOpt)
		}
	}
}

// observeTenants observes the tenants' counters, while tenants are set.
func (ob *observables) observeTenants(o metric.Observer, b *Batcher) {
	tt := b.tenants.Load()
	if tt == nil {
		return
	}
	for _, ts := range tt.list {
		tn := keyTenant.String(ts.name)
		o.ObserveInt64(ob.tAdmitted, ts.admitted.Load(), metric.WithAttributes(tn))
		o.ObserveInt64(ob.tPending, ts.pending.Load(), metric.WithAttributes(tn))
		for oc := range ts.completed {
			if n := ts.completed[oc].Load(); n > 0 || oc == outcomeOK {
				o.ObserveInt64(ob.tCompleted, n, metric.WithAttributes(tn, keyOutcome.String(outcomeNames[oc])))
			}
		}
		for q := range ts.rejected {
			o.ObserveInt64(ob.tRejected, ts.rejected[q].Load(), metric.WithAttributes(tn, keyQuota.String(quotaNames[q])))
		}
	}
}

// backendOpt returns the attribute set of the backend name.
func (ob *observables) backendOpt(name string) metric.ObserveOption {
	if o, ok := ob.backendOpts.Load(name); ok {
		return o.(metric.ObserveOption)
	}
	o, _ := ob.backendOpts.LoadOrStore(name, metric.WithAttributeSet(attribute.NewSet(keyBackend.String(name))))
	return o.(metric.ObserveOption)
}

// observeBackend observes one backend's counters, breaker and limits.
func (ob *observables) observeBackend(o metric.Observer, b *Batcher, st *BackendStats) {
	bo := ob.backendOpt(st.Name)
	be := keyBackend.String(st.Name)
	o.ObserveInt64(ob.upReqs, st.Items, bo)
	o.ObserveInt64(ob.saved, max(st.Items-st.Calls, 0)+st.DedupHits, bo)
	o.ObserveInt64(ob.limited, st.RateLimited, bo)
	for _, class := range classNames {
		o.ObserveInt64(ob.retries, st.Retries[class], metric.WithAttributes(be, keyErrType.String(class)))
	}
	o.ObserveInt64(ob.fallbacks, st.Fallbacks, bo)
	o.ObserveInt64(ob.dedup, st.DedupHits, bo)
	for _, budget := range []string{budgetConcurrency, budgetRPM, budgetTPM, budgetPause} {
		o.ObserveInt64(ob.waits, st.Waits[budget], metric.WithAttributes(be, keyBudget.String(budget)))
	}
	o.ObserveInt64(ob.budgetFails, st.BudgetFailures, bo)
	for _, s := range []BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen} {
		v := int64(0)
		if st.Breaker == s {
			v = 1
		}
		o.ObserveInt64(ob.breaker, v, metric.WithAttributes(be, keyState.String(s.String())))
		o.ObserveInt64(ob.transitions, st.BreakerTransitions[s.String()], metric.WithAttributes(be, keyState.String(s.String())))
	}
	o.ObserveInt64(ob.inFlight, int64(st.InFlight), bo)
	o.ObserveInt64(ob.concLimit, int64(st.Limit), bo)
	cfg := configuredLimits(b, st.Name)
	o.ObserveInt64(ob.concMax, int64(cfg.MaxConcurrency), bo)
	if cfg.RPM > 0 {
		o.ObserveFloat64(ob.rpm, st.RPM, bo)
		o.ObserveInt64(ob.rpmMax, int64(cfg.RPM), bo)
	}
	if cfg.TPM > 0 {
		o.ObserveFloat64(ob.tpm, st.TPM, bo)
		o.ObserveInt64(ob.tpmMax, int64(cfg.TPM), bo)
	}
}
