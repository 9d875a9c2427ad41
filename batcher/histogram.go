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
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The two histograms every request records when it ends
// (batcher.request.duration and batcher.request.queue_wait) are, with a
// MetricsProducer, counted here with atomics instead of through the
// OpenTelemetry SDK, and handed to the SDK's readers when they collect.
//
// Why by hand: the SDK (v1.47) spends about 150–300 ns of CPU on each
// Record even with a prebuilt attribute set and exemplars off (it walks
// the set through reflection to normalise it, looks the series up in a
// sync.Map keyed by an interface, and updates hot/cold counters); two
// records a request were the largest single cost of a request in the
// core. A series here is found by index ([priority][outcome] of the
// route) and costs a bucket search and three atomic adds (BenchmarkMetricsRecording,
// TestMetricsProducerMatchesSDK). The SDK has no cheaper path: no bound
// instruments, no asynchronous histogram; sdk/metric.Producer is its way
// to take pre-aggregated data, and the readers batcherd builds take one
// (telemetry.Setup).

// MetricsProducer hands the request histograms of the cores built with
// WithMetricsProducer(p) to the metric readers p is registered on. It
// implements go.opentelemetry.io/otel/sdk/metric.Producer: give it to
// every reader of the core's MeterProvider (sdkmetric.WithProducer, the
// Prometheus exporter's WithProducer), or those readers miss the two
// histograms. telemetry.Setup does so.
//
// Its output is what the SDK would produce for the same measurements:
// the same names, units, descriptions, attribute sets and buckets, in
// cumulative temporality, with sum, min and max, without exemplars. Cores
// sharing p add up, as they would on one MeterProvider.
type MetricsProducer struct {
	start time.Time

	mu      sync.Mutex
	sources []*metrics // guarded by mu
}

// NewMetricsProducer returns a producer with no core yet.
func NewMetricsProducer() *MetricsProducer { return &MetricsProducer{start: time.Now()} }

// WithMetricsProducer makes the core count batcher.request.duration and
// batcher.request.queue_wait itself and hand them to readers through p
// instead of recording them on the MeterProvider. Default nil: they are
// recorded on the MeterProvider. Without WithMeterProvider it does
// nothing.
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
	now := time.Now()
	duration := newHistogramPoints(p.start, now)
	queueWait := newHistogramPoints(p.start, now)
	for _, m := range sources {
		for _, rm := range *m.routes.Load() {
			for pr := range numPriorities {
				for o := range numOutcomes {
					duration.add(rm.durations[pr][o].Load())
				}
				queueWait.add(rm.queueWaits[pr].Load())
			}
		}
	}
	// As the SDK does, a histogram without data points is left out.
	var out []metricdata.Metrics
	if len(duration.points) > 0 {
		out = append(out, metricdata.Metrics{Name: durationName, Description: durationDesc, Unit: "s", Data: duration.histogram()})
	}
	if len(queueWait.points) > 0 {
		out = append(out, metricdata.Metrics{Name: queueWaitName, Description: queueWaitDesc, Unit: "s", Data: queueWait.histogram()})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: meterName}, Metrics: out}}, nil
}

// The per-request histograms' names and descriptions, shared by the
// SDK instruments and MetricsProducer.
const (
	durationName  = "batcher.request.duration"
	durationDesc  = "Time from admission to the terminal result, by route, priority and outcome."
	queueWaitName = "batcher.request.queue_wait"
	queueWaitDesc = "Time from admission to the request's first upstream call."
)

// histogram is one series of a histogram of durations over
// secondsBuckets. record may run concurrently with itself and with a
// reader's snapshot; a snapshot taken while records are in flight may
// count one in its buckets and not yet in its sum (the SDK's hot/cold
// swap avoids that at the cost of two more atomics a record). Its count
// is the sum of its buckets, so that count and buckets always agree.
type histogram struct {
	attrs  attribute.Set
	counts [len(secondsBucketsArr) + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
	min    atomic.Int64 // nanoseconds; math.MaxInt64 until the first record
	max    atomic.Int64 // nanoseconds; math.MinInt64 until the first record
}

func newHistogram(attrs attribute.Set) *histogram {
	h := &histogram{attrs: attrs}
	h.min.Store(math.MaxInt64)
	h.max.Store(math.MinInt64)
	return h
}

// record adds d. Its bucket is the one the SDK picks for d.Seconds():
// the first bound at or above it.
func (h *histogram) record(d time.Duration) {
	h.counts[sort.SearchFloat64s(secondsBuckets, d.Seconds())].Add(1)
	h.sum.Add(int64(d))
	for v := h.min.Load(); int64(d) < v && !h.min.CompareAndSwap(v, int64(d)); v = h.min.Load() {
	}
	for v := h.max.Load(); int64(d) > v && !h.max.CompareAndSwap(v, int64(d)); v = h.max.Load() {
	}
}

// newSeries puts a series with the attributes kv in slot unless a
// concurrent first measurement did, and returns the one in slot.
func newSeries(slot *atomic.Pointer[histogram], kv ...attribute.KeyValue) *histogram {
	slot.CompareAndSwap(nil, newHistogram(attribute.NewSet(kv...)))
	return slot.Load()
}

// histogramPoints gathers data points by attribute set, adding up the
// series of several cores that share one.
type histogramPoints struct {
	start, now time.Time
	points     []metricdata.HistogramDataPoint[float64]
	index      map[attribute.Distinct]int
}

func newHistogramPoints(start, now time.Time) *histogramPoints {
	return &histogramPoints{start: start, now: now, index: map[attribute.Distinct]int{}}
}

func (hp *histogramPoints) add(h *histogram) {
	if h == nil {
		return
	}
	counts := make([]uint64, len(h.counts))
	var n uint64
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
		n += counts[i]
	}
	if n == 0 {
		return
	}
	sum, lo, hi := h.sum.Load(), h.min.Load(), h.max.Load()
	i, ok := hp.index[h.attrs.Equivalent()]
	if !ok {
		hp.index[h.attrs.Equivalent()] = len(hp.points)
		hp.points = append(hp.points, metricdata.HistogramDataPoint[float64]{
			Attributes: h.attrs, StartTime: hp.start, Time: hp.now,
			Bounds: slices.Clone(secondsBuckets), BucketCounts: counts, Count: n,
			Sum: time.Duration(sum).Seconds(),
			Min: metricdata.NewExtrema(time.Duration(lo).Seconds()),
			Max: metricdata.NewExtrema(time.Duration(hi).Seconds()),
		})
		return
	}
	dp := &hp.points[i]
	for j := range counts {
		dp.BucketCounts[j] += counts[j]
	}
	dp.Count += n
	dp.Sum += time.Duration(sum).Seconds()
	if v, _ := dp.Min.Value(); time.Duration(lo).Seconds() < v {
		dp.Min = metricdata.NewExtrema(time.Duration(lo).Seconds())
	}
	if v, _ := dp.Max.Value(); time.Duration(hi).Seconds() > v {
		dp.Max = metricdata.NewExtrema(time.Duration(hi).Seconds())
	}
}

func (hp *histogramPoints) histogram() metricdata.Histogram[float64] {
	return metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: hp.points}
}
