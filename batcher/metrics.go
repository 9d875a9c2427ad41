package batcher

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the core's instruments.
const meterName = "github.com/batcherhq/batcher/batcher"

// WithMeterProvider sets where the core records its metrics. Default none:
// no instruments at all, at no cost on the hot path. Instruments are created
// once, in New; a provider that fails to create one fails New.
//
// The instruments and their attributes are listed in metrics.go. Every
// attribute value comes from the configuration (route and backend names) or
// a small fixed set (priorities, outcomes, error classes), never from a
// request: their number stays bounded whatever callers send.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// Attribute keys. gen_ai.* and error.type follow the OpenTelemetry semantic
// conventions; the rest are the batcher's own.
const (
	keyRoute    = attribute.Key("batcher.route")
	keyBackend  = attribute.Key("batcher.backend")
	keyPriority = attribute.Key("batcher.priority")
	keyOutcome  = attribute.Key("batcher.outcome")
	keyReason   = attribute.Key("batcher.reason")
	keyBudget   = attribute.Key("batcher.budget")
	keyState    = attribute.Key("batcher.breaker.state")
	keyErrType  = attribute.Key("error.type")
	keyTenant   = attribute.Key("batcher.tenant")
	keyQuota    = attribute.Key("batcher.quota")

	keyGenAIOp        = attribute.Key("gen_ai.operation.name")
	keyGenAIProvider  = attribute.Key("gen_ai.provider.name")
	keyGenAIReqModel  = attribute.Key("gen_ai.request.model")
	keyGenAITokenType = attribute.Key("gen_ai.token.type")
)

// Outcomes of a request, the values of batcher.outcome: "ok", the
// batcher's own ends, or the upstream error class (classNames).
const (
	outcomeOK = iota
	outcomeCanceled
	outcomeDeadline
	outcomeShutdown
	outcomeNoBackend
	outcomeBudget
	outcomeInvalid
	outcomeError // an error of no known kind
	outcomeClass // + ErrorClass: an upstream failure of that class
	numOutcomes  = outcomeClass + len(classNames)
)

var outcomeNames = func() [numOutcomes]string {
	n := [numOutcomes]string{"ok", "canceled", "deadline", "shutdown", "no_backend", "budget_exhausted", "invalid", "error"}
	for c, name := range classNames {
		n[outcomeClass+c] = name
	}
	return n
}()

// outcomeOf maps a result's error to its outcome.
func outcomeOf(err error) int {
	if err == nil {
		return outcomeOK
	}
	var ue *UpstreamError
	switch {
	// A backend's call the caller abandoned (a streamed answer whose
	// client left) ends with the context's error: canceled, not an
	// upstream "error" an operator would page on.
	case errors.Is(err, ErrCanceled), errors.Is(err, context.Canceled):
		return outcomeCanceled
	case errors.Is(err, ErrDeadline):
		return outcomeDeadline
	case errors.Is(err, ErrShutdown):
		return outcomeShutdown
	case errors.Is(err, ErrNoBackend):
		return outcomeNoBackend
	case errors.Is(err, ErrBudgetExhausted):
		return outcomeBudget
	case errors.Is(err, ErrInvalid):
		return outcomeInvalid
	case errors.As(err, &ue) && int(ue.Class) < len(classNames):
		return outcomeClass + int(ue.Class)
	}
	return outcomeError
}

// rejectReason names why Submit, or a door through Batcher.Admit, refused
// a request: the values of batcher.reason on batcher.requests.rejected
// (and on batcher.requests.deferred: queue_full, quota).
func rejectReason(err error) string {
	switch {
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrQueueFull):
		return "queue_full"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrNoBackend):
		return "no_backend"
	case errors.Is(err, ErrCanceled):
		return "canceled"
	case errors.Is(err, ErrDeadline):
		return "deadline"
	case errors.Is(err, ErrQuotaExceeded):
		return "quota"
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	case errors.Is(err, ErrRevoked):
		return "revoked"
	}
	return "error"
}

// Histogram buckets. Seconds from a millisecond to two minutes (a batch
// window is tens of milliseconds; an upstream call up to the attempt
// timeout); batch sizes in powers of two; fill ratios in tenths.
var (
	secondsBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	sizeBuckets    = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
	fillBuckets    = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}
	tokenBuckets   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}
)

// metrics are the core's instruments. A nil *metrics records nothing: every
// method checks, so that call sites stay one line.
//
// Recording happens at three places: Submit (admitted, rejected; deferred
// for TrySubmit), Call.finish (completed, the request's total time and
// queue wait), the batch runner after each upstream call (batch size, fill
// and wait, the upstream call's duration and token usage; its outcome and
// the budget it used are atomics, upstreamCounts). The rest (calls by
// outcome and budget used, queue depth, backends' counters, breaker state,
// rates) are observed from Lanes and Stats when a reader collects, at no
// cost on the hot path.
//
// Attribute sets are built once, in New, for every route, priority and
// outcome, so that recording allocates nothing. With a MetricsProducer
// (byHand) the histograms are counted by the core (histogram.go) and the
// completed counts are the request durations' counts.
type metrics struct {
	rejected metric.Int64Counter
	deferred metric.Int64Counter
	// The histograms (histDefs): SDK instruments, or with a
	// MetricsProducer counted by hand.
	duration, queueWait, batchWait, tokens, opDur, batchSize, batchFill, ttft, tpot hist

	// routes and pairs are replaced whole (copy on write) when SetRoutes
	// adds routes, under addMu; entries are never removed, so that a
	// removed route's counts do not vanish.
	routes atomic.Pointer[map[string]*routeMetrics]
	pairs  atomic.Pointer[map[routeBackend]*pairMetrics]
	// upstream holds each backend's per-batch counts, observed at
	// collection (observe.go); copy on write under addMu, as routes.
	upstream atomic.Pointer[map[string]*upstreamCounts]
	addMu    sync.Mutex
	reg      metric.Registration
	byHand   bool

	handMu sync.Mutex
	hand   []*histogram // byHand: every series made so far; guarded by handMu
}

// listHistogram lists a series made by hand, for Produce.
func (m *metrics) listHistogram(h *histogram) {
	m.handMu.Lock()
	defer m.handMu.Unlock()
	m.hand = append(m.hand, h)
}

// handHistograms returns the series made by hand so far.
func (m *metrics) handHistograms() []*histogram {
	m.handMu.Lock()
	defer m.handMu.Unlock()
	return m.hand
}

func (m *metrics) route(name string) *routeMetrics { return (*m.routes.Load())[name] }

// addRoutes makes the attribute sets of the routes and route-backend
// pairs of rcs that have none yet, and points each of rcs, which nobody
// else sees yet, at its own.
func (m *metrics) addRoutes(rcs map[string]*routeConfig) {
	m.addMu.Lock()
	defer m.addMu.Unlock()
	routes := maps.Clone(*m.routes.Load())
	pairs := maps.Clone(*m.pairs.Load())
	upstream := maps.Clone(*m.upstream.Load())
	for _, rc := range rcs {
		if routes[rc.Name] == nil {
			routes[rc.Name] = m.newRouteMetrics(rc.Name)
		}
		rc.metrics = routes[rc.Name] // rc is not published yet
		for i := range rc.targets {
			t := &rc.targets[i]
			k := routeBackend{rc.Name, t.be.name}
			if pm := pairs[k]; pm != nil {
				t.metrics = pm
				continue
			}
			op, prov, model := keyGenAIOp.String(genAIOperation(rc.Op)), keyGenAIProvider.String(providerName(t.be)), keyGenAIReqModel.String(t.model)
			be := keyBackend.String(t.be.name)
			up := upstream[t.be.name]
			if up == nil {
				up = newUpstreamCounts(be)
				upstream[t.be.name] = up
			}
			pm := &pairMetrics{up: up}
			route := keyRoute.String(rc.Name)
			batch := attribute.NewSet(route, be)
			pm.batchSize.init(&m.batchSize, batch)
			pm.batchFill.init(&m.batchFill, batch)
			pm.batchWait.init(&m.batchWait, attribute.NewSet(route))
			pm.input.init(&m.tokens, attribute.NewSet(op, prov, model, keyGenAITokenType.String("input"), be))
			pm.output.init(&m.tokens, attribute.NewSet(op, prov, model, keyGenAITokenType.String("output"), be))
			ok := attribute.NewSet(op, prov, model, be)
			pm.ttft.init(&m.ttft, ok)
			pm.tpot.init(&m.tpot, ok)
			for o := range numOutcomes {
				if o == outcomeOK {
					pm.opDur[o].init(&m.opDur, ok)
				} else {
					pm.opDur[o].init(&m.opDur, attribute.NewSet(op, prov, model, be, keyErrType.String(outcomeNames[o])))
				}
			}
			pairs[k] = pm
			t.metrics = pm
		}
	}
	m.routes.Store(&routes)
	m.pairs.Store(&pairs)
	m.upstream.Store(&upstream)
}

// routeMetrics holds one route's counts and series.
//
// The admitted and completed counts are atomics, observed when a reader
// collects: an atomic add costs a request a few nanoseconds where a
// synchronous SDK counter costs it a couple of hundred. admitted, which
// producers add to, has a cache line of its own apart from what the
// goroutines that end requests add to.
type routeMetrics struct {
	name     string
	admitted [numPriorities]atomic.Int64
	_        [64]byte
	// completed is counted without a MetricsProducer; with one, the
	// series of durations count the same.
	completed [numPriorities][numOutcomes]atomic.Int64
	byPrio    [numPriorities]metric.ObserveOption              // route, priority
	done      [numPriorities][numOutcomes]metric.ObserveOption // route, priority, outcome

	durations  [numPriorities][numOutcomes]series // batcher.request.duration
	queueWaits [numPriorities]series              // batcher.request.queue_wait
}

func (m *metrics) newRouteMetrics(name string) *routeMetrics {
	rm := &routeMetrics{name: name}
	for p := range numPriorities {
		route, prio := keyRoute.String(name), keyPriority.String(Priority(p).String())
		set := attribute.NewSet(route, prio)
		rm.byPrio[p] = metric.WithAttributeSet(set)
		rm.queueWaits[p].init(&m.queueWait, set)
		for o := range numOutcomes {
			set := attribute.NewSet(route, prio, keyOutcome.String(outcomeNames[o]))
			rm.done[p][o] = metric.WithAttributeSet(set)
			rm.durations[p][o].init(&m.duration, set)
		}
	}
	return rm
}

// completedCount returns the requests of priority p that ended with
// outcome o.
func (rm *routeMetrics) completedCount(p, o int) int64 {
	if s := &rm.durations[p][o]; s.inst.m != nil {
		return s.count()
	}
	return rm.completed[p][o].Load()
}

type routeBackend struct{ route, backend string }

// pairMetrics holds the series of one route on one of its targets.
type pairMetrics struct {
	batchSize, batchFill series              // route, backend
	batchWait            series              // route
	input, output        series              // gen_ai token usage
	opDur                [numOutcomes]series // gen_ai operation duration
	ttft, tpot           series              // gen_ai.server.*: the operation's, ok
	up                   *upstreamCounts     // the backend's, shared by its routes
}

// upstreamCounts are one backend's batcher.upstream.calls (by outcome)
// and budget counters: atomics added after each upstream call and
// observed when a reader collects (observables.observeUpstream), where a
// synchronous SDK counter costs a batch a couple of hundred nanoseconds
// an Add. A series appears as the SDK's would: calls by outcome after its
// first call, the budget counters after the first batch (at 0 too).
type upstreamCounts struct {
	calls      [numOutcomes]atomic.Int64
	budgetReq  atomic.Int64
	budgetTok  atomic.Int64
	budgetSeen atomic.Bool
	callOpt    [numOutcomes]metric.ObserveOption // backend, outcome
	budgetOpt  metric.ObserveOption              // backend
}

func newUpstreamCounts(be attribute.KeyValue) *upstreamCounts {
	up := &upstreamCounts{budgetOpt: metric.WithAttributeSet(attribute.NewSet(be))}
	for o := range numOutcomes {
		up.callOpt[o] = metric.WithAttributeSet(attribute.NewSet(be, keyOutcome.String(outcomeNames[o])))
	}
	return up
}

// budgetUsed adds a batch's budget use.
func (up *upstreamCounts) budgetUsed(used cost) {
	if !up.budgetSeen.Load() {
		up.budgetSeen.Store(true)
	}
	if used.requests > 0 { // the SDK drops a negative increment
		up.budgetReq.Add(int64(used.requests))
	}
	if used.tokens > 0 {
		up.budgetTok.Add(int64(used.tokens))
	}
}

// genAIOperation is the gen_ai.operation.name of an operation.
func genAIOperation(op Operation) string {
	switch op {
	case OpChat:
		return "chat"
	case OpCompletion:
		return "text_completion"
	case OpEmbedding:
		return "embeddings"
	}
	return op.String()
}

// ProviderNamer may be implemented by a Backend to name its provider in
// gen_ai.provider.name ("openai"); otherwise the backend's configured name
// stands for it.
type ProviderNamer interface {
	GenAIProvider() string
}

func providerName(be *backendState) string {
	if p, ok := be.impl.(ProviderNamer); ok {
		if n := p.GenAIProvider(); n != "" {
			return n
		}
	}
	return be.name
}

// newHist makes h an instrument of def: the SDK's on mt, or by hand.
func (m *metrics) newHist(mt metric.Meter, h *hist, def *histDef) error {
	h.def = def
	if m.byHand {
		h.m = m
		return nil
	}
	unit, desc, bounds := metric.WithUnit(def.unit), metric.WithDescription(def.desc), metric.WithExplicitBucketBoundaries(def.bounds...)
	var err error
	if def.kind == kindInt {
		h.i, err = mt.Int64Histogram(def.name, unit, desc, bounds)
	} else {
		h.f, err = mt.Float64Histogram(def.name, unit, desc, bounds)
	}
	return err
}

// newMetrics creates the core's instruments on mp; nil mp: none. With
// producer, the histograms are counted for it instead.
func newMetrics(mp metric.MeterProvider, producer *MetricsProducer, b *Batcher) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	mt := mp.Meter(meterName)
	m := &metrics{byHand: producer != nil}
	m.routes.Store(&map[string]*routeMetrics{})
	m.pairs.Store(&map[routeBackend]*pairMetrics{})
	m.upstream.Store(&map[string]*upstreamCounts{})
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := mt.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.rejected = counter("batcher.requests.rejected", "{request}", "Requests refused at admission, by route, priority and reason.")
	m.deferred = counter("batcher.requests.deferred", "{request}", "Refusals at admission that the caller keeps and offers again (TrySubmit: a job's backlog), by route, priority and reason; not rejections.")
	for _, h := range []struct {
		inst *hist
		def  *histDef
	}{
		{&m.duration, histDuration}, {&m.queueWait, histQueueWait}, {&m.batchWait, histBatchWait},
		{&m.tokens, histTokens}, {&m.opDur, histOpDur}, {&m.batchSize, histBatchSize},
		{&m.batchFill, histBatchFill}, {&m.ttft, histTTFT}, {&m.tpot, histTPOT},
	} {
		errs = append(errs, m.newHist(mt, h.inst, h.def))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	m.addRoutes(*b.routes.Load())
	if err := m.observe(mt, b); err != nil {
		return nil, err
	}
	if producer != nil {
		producer.add(m)
	}
	return m, nil
}

// submitted records Submit's verdict on req: admitted (c set) or rejected.
func (m *metrics) submitted(req *Request, c **Call, err *error) {
	if m == nil {
		return
	}
	if *err == nil && *c != nil {
		if rm := (*c).rc.metrics; rm != nil && int(req.Priority) < numPriorities {
			rm.admitted[req.Priority].Add(1)
		}
		return
	}
	m.refused(m.rejected, req, *err)
}

// postponed records a refusal that TrySubmit's caller keeps and offers
// again.
func (m *metrics) postponed(req *Request, err error) { m.refused(m.deferred, req, err) }

// refused adds one to counter, by route, priority and err's reason.
func (m *metrics) refused(counter metric.Int64Counter, req *Request, err error) {
	route := req.Route
	if m.route(route) == nil {
		route = "unknown" // never a caller's string: it would be unbounded
	}
	counter.Add(context.Background(), 1, metric.WithAttributes(
		keyRoute.String(route), keyPriority.String(priorityLabel(req.Priority)), keyReason.String(rejectReason(err))))
}

func priorityLabel(p Priority) string {
	if int(p) < numPriorities {
		return p.String()
	}
	return "invalid"
}

// finished records a call's terminal result r.
func (m *metrics) finished(c *Call, r *Result) {
	if m == nil {
		return
	}
	rm := c.rc.metrics
	p := c.prio
	o := outcomeOf(r.Err)
	if !m.byHand { // by hand, the duration's series counts it
		rm.completed[p][o].Add(1)
	}
	rm.durations[p][o].seconds(r.Timings.Total)
	if r.Timings.Queued > 0 {
		rm.queueWaits[p].seconds(r.Timings.Queued)
	}
	if c.stream != nil && r.Err == nil {
		m.streamed(c, r)
	}
}

// dispatched records one upstream call of run r: its requests' responses
// out, its duration d, its error, and the budget it used.
func (m *metrics) dispatched(r *batchRun, out []Response, d time.Duration, err error, used cost) {
	if m == nil {
		return
	}
	pm := r.pairMetrics()
	if pm == nil {
		return
	}
	n := len(out)
	pm.batchSize.int(int64(n))
	// The batch's wait: its oldest first-attempt request's, from admission
	// until the batch formed.
	var wait time.Duration
	for _, c := range r.calls {
		if c.attempts == 1 && c.dispatched {
			wait = max(wait, c.batchWait)
		}
	}
	pm.batchWait.seconds(wait)
	// The pair's series outlive a SetRoutes that changes the max batch
	// size; the fill is of the size the batch was cut under, its lane's.
	if size := r.lane.route.Batch.MaxBatchSize; size > 0 {
		pm.batchFill.float(float64(n) / float64(size))
	}
	if r.upCalls.Load() == 0 { // the backend reported no calls: the Dispatch was one
		o := outcomeOf(err)
		pm.up.calls[o].Add(1)
		pm.opDur[o].seconds(d)
	}
	pm.up.budgetUsed(used)
	var in, outTok int64
	for i := range out {
		if out[i].Err == nil {
			in += int64(out[i].Usage.PromptTokens)
			outTok += int64(out[i].Usage.CompletionTokens)
		}
	}
	if in > 0 || outTok > 0 {
		pm.input.int(in)
		pm.output.int(outTok)
	}
}

// upstreamCall records one upstream call a backend reported for r's batch
// (Batch.UpstreamCall): it took d and failed with err (nil: succeeded).
func (m *metrics) upstreamCall(r *batchRun, d time.Duration, err error) {
	if m == nil {
		return
	}
	pm := r.pairMetrics()
	if pm == nil {
		return
	}
	o := outcomeOf(err)
	pm.up.calls[o].Add(1)
	pm.opDur[o].seconds(d)
}

// pairMetrics returns the series of r's route on r's backend: its
// lane's target's.
func (r *batchRun) pairMetrics() *pairMetrics {
	return r.lane.route.targets[r.lane.key.target].metrics
}

// configuredLimits returns a backend's configuration as New resolved it.
func configuredLimits(b *Batcher, name string) BackendConfig {
	if be := b.backends.Load().byName[name]; be != nil {
		return *be.configured.Load() // Reconfigure changes the limits in place
	}
	return BackendConfig{}
}

// BackendLimits returns the named backend's configured limits as New
// resolved them (MaxConcurrency, RPM, TPM), for live views that show the
// current adaptive limits of Stats against them.
func (b *Batcher) BackendLimits(name string) (maxConcurrency, rpm, tpm int) {
	c := configuredLimits(b, name)
	return c.MaxConcurrency, c.RPM, c.TPM
}
