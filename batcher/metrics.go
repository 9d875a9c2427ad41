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
	case errors.Is(err, ErrCanceled):
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
	secondsBucketsArr = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	secondsBuckets    = secondsBucketsArr[:]
	sizeBuckets       = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
	fillBuckets       = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}
	tokenBuckets      = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}
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
// rates) are
// observed from Lanes and Stats when a reader collects, at no cost on the
// hot path.
//
// Attribute sets are built once, in New, for every route, priority and
// outcome, so that recording allocates nothing.
type metrics struct {
	rejected  metric.Int64Counter
	deferred  metric.Int64Counter
	duration  metric.Float64Histogram // batcher.request.duration
	queueWait metric.Float64Histogram
	batchWait metric.Float64Histogram
	tokens    metric.Int64Histogram // gen_ai.client.token.usage
	opDur     metric.Float64Histogram
	batchSize metric.Int64Histogram
	batchFill metric.Float64Histogram
	ttft      metric.Float64Histogram // gen_ai.server.time_to_first_token (stream.go)
	tpot      metric.Float64Histogram // gen_ai.server.time_per_output_token

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
	// byHand: duration and queueWait are nil, and each request's are
	// counted in its routeMetrics' histograms, for a MetricsProducer
	// (histogram.go).
	byHand bool
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
			rm := &routeMetrics{name: rc.Name}
			for p := range numPriorities {
				route, prio := keyRoute.String(rc.Name), keyPriority.String(Priority(p).String())
				rm.byPrio[p] = metric.WithAttributeSet(attribute.NewSet(route, prio))
				rm.byPrioRec[p] = recOpt(route, prio)
				for o := range numOutcomes {
					set := attribute.NewSet(route, prio, keyOutcome.String(outcomeNames[o]))
					rm.done[p][o] = metric.WithAttributeSet(set)
					rm.doneRec[p][o] = []metric.RecordOption{metric.WithAttributeSet(set)}
				}
			}
			routes[rc.Name] = rm
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
			pm := &pairMetrics{
				up:         up,
				batch:      recOpt(keyRoute.String(rc.Name), be),
				batchRoute: recOpt(keyRoute.String(rc.Name)),
				input:      recOpt(op, prov, model, keyGenAITokenType.String("input"), be),
				output:     recOpt(op, prov, model, keyGenAITokenType.String("output"), be),
				maxBatch:   float64(rc.Batch.MaxBatchSize),
			}
			for o := range numOutcomes {
				if o == outcomeOK {
					pm.op[o] = recOpt(op, prov, model, be)
				} else {
					pm.op[o] = recOpt(op, prov, model, be, keyErrType.String(outcomeNames[o]))
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

// routeMetrics holds one route's attribute sets.
//
// The admitted and completed counts are atomics, observed when a reader
// collects: an atomic add costs a request a few nanoseconds where a
// synchronous SDK counter costs it a couple of hundred, and the 5% budget
// for metrics is spent on the histograms, which need the SDK's
// aggregation.
type routeMetrics struct {
	name      string
	admitted  [numPriorities]atomic.Int64
	completed [numPriorities][numOutcomes]atomic.Int64
	byPrio    [numPriorities]metric.ObserveOption               // route, priority
	byPrioRec [numPriorities][]metric.RecordOption              // route, priority
	done      [numPriorities][numOutcomes]metric.ObserveOption  // route, priority, outcome
	doneRec   [numPriorities][numOutcomes][]metric.RecordOption // route, priority, outcome

	// With a MetricsProducer: the series of batcher.request.duration and
	// queue_wait, made at their first measurement.
	durations  [numPriorities][numOutcomes]atomic.Pointer[histogram]
	queueWaits [numPriorities]atomic.Pointer[histogram]
}

// duration and queueWait return rm's series of batcher.request.duration
// for priority p and outcome o, and of queue_wait for p, made with their
// attribute sets at the first measurement.
func (rm *routeMetrics) duration(p Priority, o int) *histogram {
	if h := rm.durations[p][o].Load(); h != nil {
		return h
	}
	return newSeries(&rm.durations[p][o], keyRoute.String(rm.name), keyPriority.String(p.String()), keyOutcome.String(outcomeNames[o]))
}

func (rm *routeMetrics) queueWait(p Priority) *histogram {
	if h := rm.queueWaits[p].Load(); h != nil {
		return h
	}
	return newSeries(&rm.queueWaits[p], keyRoute.String(rm.name), keyPriority.String(p.String()))
}

type routeBackend struct{ route, backend string }

// pairMetrics holds the attribute sets of one route on one of its targets.
type pairMetrics struct {
	batch      []metric.RecordOption              // route, backend
	batchRoute []metric.RecordOption              // route
	input      []metric.RecordOption              // gen_ai token usage, input
	output     []metric.RecordOption              // gen_ai token usage, output
	op         [numOutcomes][]metric.RecordOption // gen_ai operation duration
	up         *upstreamCounts                    // the backend's, shared by its routes
	maxBatch   float64
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

func recOpt(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
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

// newMetrics creates the core's instruments on mp; nil mp: none. With
// producer, the per-request histograms are counted for it instead.
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
	fhist := func(name, unit, desc string, buckets []float64) metric.Float64Histogram {
		h, err := mt.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	ihist := func(name, unit, desc string, buckets []float64) metric.Int64Histogram {
		h, err := mt.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	m.rejected = counter("batcher.requests.rejected", "{request}", "Requests refused at admission, by route, priority and reason.")
	m.deferred = counter("batcher.requests.deferred", "{request}", "Refusals at admission that the caller keeps and offers again (TrySubmit: a job's backlog), by route, priority and reason; not rejections.")
	if !m.byHand {
		m.duration = fhist(durationName, "s", durationDesc, secondsBuckets)
		m.queueWait = fhist(queueWaitName, "s", queueWaitDesc, secondsBuckets)
	}
	m.batchWait = fhist("batcher.batch.wait", "s", "Time a batch accumulated: from its oldest request's admission until it formed.", secondsBuckets)
	m.tokens = ihist("gen_ai.client.token.usage", "{token}", "Tokens used by each upstream call (one batch), input and output, as the upstream reported them.", tokenBuckets)
	m.opDur = fhist("gen_ai.client.operation.duration", "s", "Duration of each upstream call (one batch, or one request of a fan-out, or one pack), by backend and outcome.", secondsBuckets)
	m.batchSize = ihist("batcher.batch.size", "{request}", "Requests in each batch sent upstream.", sizeBuckets)
	m.batchFill = fhist("batcher.batch.fill_ratio", "1", "Batch size over the route's max batch size.", fillBuckets)
	m.ttft = fhist("gen_ai.server.time_to_first_token", "s", "Streamed requests: time from admission to the first delta, for successful answers.", ttftBuckets)
	m.tpot = fhist("gen_ai.server.time_per_output_token", "s", "Streamed requests: time per output token after the first, for successful answers.", tpotBuckets)
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
	ctx := context.Background()
	rm.completed[p][o].Add(1)
	switch {
	case m.byHand:
		rm.duration(p, o).record(r.Timings.Total)
		if r.Timings.Queued > 0 {
			rm.queueWait(p).record(r.Timings.Queued)
		}
	default:
		m.duration.Record(ctx, r.Timings.Total.Seconds(), rm.doneRec[p][o]...)
		if r.Timings.Queued > 0 {
			m.queueWait.Record(ctx, r.Timings.Queued.Seconds(), rm.byPrioRec[p]...)
		}
	}
	if c.stream != nil && r.Err == nil {
		m.streamed(c, r)
	}
}

// dispatched records one upstream call of run r: its requests' responses
// out, its duration in seconds, its error, and the budget it used.
func (m *metrics) dispatched(r *batchRun, out []Response, seconds float64, err error, used cost) {
	if m == nil {
		return
	}
	n := len(out)
	pm := r.pairMetrics()
	if pm == nil {
		return
	}
	ctx := context.Background()
	o := outcomeOf(err)
	m.batchSize.Record(ctx, int64(n), pm.batch...)
	// The batch's wait: its oldest first-attempt request's, from admission
	// until the batch formed.
	var wait time.Duration
	for _, c := range r.calls {
		if c.attempts == 1 && c.dispatched {
			wait = max(wait, c.batchWait)
		}
	}
	m.batchWait.Record(ctx, wait.Seconds(), pm.batchRoute...)
	if pm.maxBatch > 0 {
		m.batchFill.Record(ctx, float64(n)/pm.maxBatch, pm.batch...)
	}
	if r.upCalls.Load() == 0 { // the backend reported no calls: the Dispatch was one
		pm.up.calls[o].Add(1)
		m.opDur.Record(ctx, seconds, pm.op[o]...)
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
		m.tokens.Record(ctx, in, pm.input...)
		m.tokens.Record(ctx, outTok, pm.output...)
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
	m.opDur.Record(context.Background(), d.Seconds(), pm.op[o]...)
}

// pairMetrics returns the attribute sets of r's route on r's backend: its
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
