package batcher

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Every histogram the core records (the two each request records when it
// ends, the five each batch records after its upstream call, the two each
// streamed answer records) is, with a MetricsProducer, counted here with
// atomics instead of through the OpenTelemetry SDK, and handed to the
// SDK's readers when they collect.
//
// Why by hand: the SDK (v1.47) spends about 150–300 ns of CPU on each
// Record even with a prebuilt attribute set and exemplars off (it walks
// the set through reflection to normalise it, looks the series up in a
// sync.Map keyed by an interface, and updates hot/cold counters); two
// records a request were the largest single cost of a request in the
// core, and four a batch the largest cost of a small batch. A series here
// is found through a pointer the caller holds (routeMetrics,
// pairMetrics) and costs a bucket search over integer bounds and two
// atomic adds (BenchmarkMetricsRecording, TestMetricsProducerMatchesSDK).
// The SDK has no cheaper path: no bound instruments, no asynchronous
// histogram; sdk/metric.Producer is its way to take pre-aggregated data,
// and the readers batcherd builds take one (telemetry.Setup).

// MetricsProducer hands the histograms of the cores built with
// WithMetricsProducer(p) to the metric readers p is registered on. It
// implements go.opentelemetry.io/otel/sdk/metric.Producer: give it to
// every reader of the core's MeterProvider (sdkmetric.WithProducer, the
// Prometheus exporter's WithProducer), or those readers miss the
// histograms. telemetry.Setup does so.
//
// Its output is what the SDK would produce for the same measurements:
// the same names, units, descriptions, attribute sets, buckets and value
// types, in cumulative temporality, with sum, min and max, without
// exemplars. Cores sharing p add up, as they would on one MeterProvider.
type MetricsProducer struct {
	start time.Time

	mu      sync.Mutex
	sources []*metrics // guarded by mu
}

// NewMetricsProducer returns a producer with no core yet.
func NewMetricsProducer() *MetricsProducer { return &MetricsProducer{start: time.Now()} }

// WithMetricsProducer makes the core count its histograms
// (batcher.request.duration and queue_wait, batcher.batch.size, wait and
// fill_ratio, gen_ai.client.operation.duration and token.usage,
// gen_ai.server.time_to_first_token and time_per_output_token) itself and
// hand them to readers through p instead of recording them on the
// MeterProvider. Default nil: they are recorded on the MeterProvider.
// Without WithMeterProvider it does nothing.
func WithMetricsProducer(p *MetricsProducer) Option {
	return func(c *config) { c.metricsProducer = p }
}

func (p *MetricsProducer) add(m *metrics) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sources = append(p.sources, m)
}

// Produce returns the histograms of p's cores, one data point for each
// attribute set with at least one measurement.
func (p *MetricsProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	p.mu.Lock()
	sources := p.sources
	p.mu.Unlock()
	byDef := map[*histDef][]*histogram{}
	for _, m := range sources {
		for _, h := range m.handHistograms() {
			byDef[h.def] = append(byDef[h.def], h)
		}
	}
	now := time.Now()
	var out []metricdata.Metrics
	for _, d := range histDefs {
		var data metricdata.Aggregation
		if d.kind == kindInt {
			data = gather(byDef[d], p.start, now, (*histogram).ints)
		} else {
			data = gather(byDef[d], p.start, now, (*histogram).floats)
		}
		// As the SDK does, a histogram without data points is left out.
		if data != nil {
			out = append(out, metricdata.Metrics{Name: d.name, Description: d.desc, Unit: d.unit, Data: data})
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: meterName}, Metrics: out}}, nil
}

// histKind says what a histogram's values are and how it holds them.
type histKind uint8

const (
	kindSeconds histKind = iota // durations, held in nanoseconds, exported as float64 seconds
	kindInt                     // int64 values, exported as int64
	kindFloat                   // float64 values, held as their bits
)

// histDef is one histogram instrument: what readers see of it, and its
// bucket bounds. intBounds holds, for kindSeconds and kindInt, the
// largest held value of each bucket: v (nanoseconds for kindSeconds) is
// in the first bucket whose intBounds is at or above it exactly when the
// SDK would put the value it records (v's seconds, or float64(v)) there,
// the first of bounds at or above it.
type histDef struct {
	name, unit, desc string
	kind             histKind
	bounds           []float64
	intBounds        []int64
}

func newHistDef(name, unit, desc string, kind histKind, bounds []float64) *histDef {
	if len(bounds) >= maxBuckets {
		panic("batcher: " + name + " has more buckets than a histogram holds")
	}
	d := &histDef{name: name, unit: unit, desc: desc, kind: kind, bounds: bounds}
	if kind != kindFloat {
		d.intBounds = make([]int64, len(bounds))
		for i, b := range bounds {
			d.intBounds[i] = d.lastAtOrBelow(b)
		}
	}
	return d
}

// asFloat is the value the SDK would record for a held integer v.
func (d *histDef) asFloat(v int64) float64 {
	if d.kind == kindSeconds {
		return time.Duration(v).Seconds()
	}
	return float64(v)
}

// lastAtOrBelow returns the largest held v whose value as the SDK would
// record it is at or below b: found from a guess by steps of one, since
// asFloat is non-decreasing and exact to well under one step where
// bounds lie.
func (d *histDef) lastAtOrBelow(b float64) int64 {
	v := int64(math.Floor(b))
	if d.kind == kindSeconds {
		v = int64(math.Floor(b * 1e9))
	}
	for d.asFloat(v) > b {
		v--
	}
	for d.asFloat(v+1) <= b {
		v++
	}
	return v
}

// maxBuckets is the most buckets a histogram holds: one more than the
// bounds of the longest list.
const maxBuckets = 17

// The histograms' names and descriptions, shared by the SDK instruments
// and MetricsProducer. histDefs lists them in the order Produce reports
// them.
var (
	histDuration  = newHistDef("batcher.request.duration", "s", "Time from admission to the terminal result, by route, priority and outcome.", kindSeconds, secondsBuckets)
	histQueueWait = newHistDef("batcher.request.queue_wait", "s", "Time from admission to the request's first upstream call.", kindSeconds, secondsBuckets)
	histBatchWait = newHistDef("batcher.batch.wait", "s", "Time a batch accumulated: from its oldest request's admission until it formed.", kindSeconds, secondsBuckets)
	histTokens    = newHistDef("gen_ai.client.token.usage", "{token}", "Tokens used by each upstream call (one batch), input and output, as the upstream reported them.", kindInt, tokenBuckets)
	histOpDur     = newHistDef("gen_ai.client.operation.duration", "s", "Duration of each upstream call (one batch, or one request of a fan-out, or one pack), by backend and outcome.", kindSeconds, secondsBuckets)
	histBatchSize = newHistDef("batcher.batch.size", "{request}", "Requests in each batch sent upstream.", kindInt, sizeBuckets)
	histBatchFill = newHistDef("batcher.batch.fill_ratio", "1", "Batch size over the route's max batch size.", kindFloat, fillBuckets)
	histTTFT      = newHistDef("gen_ai.server.time_to_first_token", "s", "Streamed requests: time from admission to the first delta, for successful answers.", kindSeconds, ttftBuckets)
	histTPOT      = newHistDef("gen_ai.server.time_per_output_token", "s", "Streamed requests: time per output token after the first, for successful answers.", kindFloat, tpotBuckets)

	histDefs = []*histDef{histDuration, histQueueWait, histBatchWait, histTokens, histOpDur, histBatchSize, histBatchFill, histTTFT, histTPOT}
)

// hist is one of a core's histogram instruments: the SDK's (f or i, by
// kind), or with a MetricsProducer none, its series counted by hand and
// listed in m.
type hist struct {
	def *histDef
	f   metric.Float64Histogram
	i   metric.Int64Histogram
	m   *metrics // byHand: where the series are listed for Produce
}

// series is one attribute set of a hist. By hand, its histogram is made
// at the first measurement (a series without one is not exported, so
// most of a route's [priority][outcome] sets never cost the memory).
type series struct {
	inst  *hist
	attrs attribute.Set
	opts  []metric.RecordOption // the SDK's
	h     atomic.Pointer[histogram]
}

func (s *series) init(inst *hist, attrs attribute.Set) {
	s.inst, s.attrs = inst, attrs
	if inst.m == nil {
		s.opts = []metric.RecordOption{metric.WithAttributeSet(attrs)}
	}
}

// hand returns s's histogram, made at the first call.
func (s *series) hand() *histogram {
	if h := s.h.Load(); h != nil {
		return h
	}
	if s.h.CompareAndSwap(nil, newHistogram(s.inst.def, s.attrs)) {
		s.inst.m.listHistogram(s.h.Load())
	}
	return s.h.Load()
}

// seconds records a duration.
func (s *series) seconds(d time.Duration) {
	if h := s.h.Load(); h != nil { // by hand, after the first: no more pointers to follow
		h.recordInt(int64(d))
	} else if s.inst.m != nil {
		s.hand().recordInt(int64(d))
	} else {
		s.inst.f.Record(context.Background(), d.Seconds(), s.opts...)
	}
}

// int records an integer.
func (s *series) int(v int64) {
	if h := s.h.Load(); h != nil {
		h.recordInt(v)
	} else if s.inst.m != nil {
		s.hand().recordInt(v)
	} else {
		s.inst.i.Record(context.Background(), v, s.opts...)
	}
}

// float records a float.
func (s *series) float(v float64) {
	if h := s.h.Load(); h != nil {
		h.recordFloat(v)
	} else if s.inst.m != nil {
		s.hand().recordFloat(v)
	} else {
		s.inst.f.Record(context.Background(), v, s.opts...)
	}
}

// count returns the measurements s counted by hand.
func (s *series) count() int64 {
	h := s.h.Load()
	if h == nil {
		return 0
	}
	_, n := h.snapshot()
	return int64(n)
}

// histogram is one series of a histogram counted by hand. record may run
// concurrently with itself and with a reader's snapshot; a snapshot
// taken while records are in flight may count one in its buckets and not
// yet in its sum (the SDK's hot/cold swap avoids that at the cost of two
// more atomics a record). Its count is the sum of its buckets, so that
// count and buckets always agree.
type histogram struct {
	def    *histDef
	attrs  attribute.Set
	counts [maxBuckets]atomic.Uint64
	// By kind: nanoseconds, the values, or float64 bits. min starts
	// above and max below every value.
	sum, min, max atomic.Int64
}

func newHistogram(def *histDef, attrs attribute.Set) *histogram {
	h := &histogram{def: def, attrs: attrs}
	if def.kind == kindFloat {
		h.min.Store(int64(math.Float64bits(math.Inf(1))))
		h.max.Store(int64(math.Float64bits(math.Inf(-1))))
	} else {
		h.min.Store(math.MaxInt64)
		h.max.Store(math.MinInt64)
	}
	return h
}

// recordInt adds v (kindSeconds: nanoseconds; kindInt).
func (h *histogram) recordInt(v int64) {
	h.counts[bucketOf(h.def.intBounds, v)].Add(1)
	h.sum.Add(v)
	h.lower(v)
	h.raise(v)
}

// lower makes v h's min if it is below it (kindSeconds, kindInt).
func (h *histogram) lower(v int64) {
	for lo := h.min.Load(); v < lo && !h.min.CompareAndSwap(lo, v); lo = h.min.Load() {
	}
}

// raise makes v h's max if it is above it (kindSeconds, kindInt).
func (h *histogram) raise(v int64) {
	for hi := h.max.Load(); v > hi && !h.max.CompareAndSwap(hi, v); hi = h.max.Load() {
	}
}

// bucketOf returns the index of the first of bounds at or above v, or
// len(bounds).
func bucketOf(bounds []int64, v int64) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bounds[mid] < v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// recordFloat adds v (kindFloat): its bucket is the one the SDK picks,
// the first bound at or above it.
func (h *histogram) recordFloat(v float64) {
	h.counts[sort.SearchFloat64s(h.def.bounds, v)].Add(1)
	casFloat(&h.sum, func(s float64) (float64, bool) { return s + v, true })
	casFloat(&h.min, func(lo float64) (float64, bool) { return v, v < lo })
	casFloat(&h.max, func(hi float64) (float64, bool) { return v, v > hi })
}

// casFloat replaces the float64 in bits by f's result while f says to.
func casFloat(bits *atomic.Int64, f func(float64) (float64, bool)) {
	for {
		old := bits.Load()
		v, ok := f(math.Float64frombits(uint64(old)))
		if !ok || bits.CompareAndSwap(old, int64(math.Float64bits(v))) {
			return
		}
	}
}

// snapshot returns h's bucket counts and their total.
func (h *histogram) snapshot() ([]uint64, uint64) {
	counts := make([]uint64, len(h.def.bounds)+1)
	var n uint64
	for i := range counts {
		counts[i] = h.counts[i].Load()
		n += counts[i]
	}
	return counts, n
}

// floats returns h's sum, min and max as the SDK's float64 histogram
// holds them.
func (h *histogram) floats() (sum, lo, hi float64) {
	s, l, m := h.sum.Load(), h.min.Load(), h.max.Load()
	if h.def.kind == kindSeconds {
		return time.Duration(s).Seconds(), time.Duration(l).Seconds(), time.Duration(m).Seconds()
	}
	return math.Float64frombits(uint64(s)), math.Float64frombits(uint64(l)), math.Float64frombits(uint64(m))
}

// ints returns h's sum, min and max (kindInt).
func (h *histogram) ints() (sum, lo, hi int64) { return h.sum.Load(), h.min.Load(), h.max.Load() }

// gather makes a histogram of hs's series with measurements, adding up
// those of several cores that share an attribute set; nil if none has
// any.
func gather[N int64 | float64](hs []*histogram, start, now time.Time, values func(*histogram) (N, N, N)) metricdata.Aggregation {
	var points []metricdata.HistogramDataPoint[N]
	index := map[attribute.Distinct]int{}
	for _, h := range hs {
		counts, n := h.snapshot()
		if n == 0 {
			continue
		}
		sum, lo, hi := values(h)
		i, ok := index[h.attrs.Equivalent()]
		if !ok {
			index[h.attrs.Equivalent()] = len(points)
			points = append(points, metricdata.HistogramDataPoint[N]{
				Attributes: h.attrs, StartTime: start, Time: now,
				Bounds: slices.Clone(h.def.bounds), BucketCounts: counts, Count: n,
				Sum: sum, Min: metricdata.NewExtrema(lo), Max: metricdata.NewExtrema(hi),
			})
			continue
		}
		dp := &points[i]
		for j := range counts {
			dp.BucketCounts[j] += counts[j]
		}
		dp.Count += n
		dp.Sum += sum
		if v, _ := dp.Min.Value(); lo < v {
			dp.Min = metricdata.NewExtrema(lo)
		}
		if v, _ := dp.Max.Value(); hi > v {
			dp.Max = metricdata.NewExtrema(hi)
		}
	}
	if len(points) == 0 {
		return nil
	}
	return metricdata.Histogram[N]{Temporality: metricdata.CumulativeTemporality, DataPoints: points}
}
