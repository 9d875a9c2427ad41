package batcher

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

var _ sdkmetric.Producer = (*MetricsProducer)(nil)

// histogramCore returns a core with routes m and n whose per-request
// histograms go to reader: through the SDK, or through a MetricsProducer
// registered on reader.
func histogramCore(t *testing.T, byHand bool) (*Batcher, sdkmetric.Reader) {
	t.Helper()
	return histogramCoreOn(t, byHand, &fakeBackend{}, BatchConfig{})
}

// histogramCoreOn is histogramCore with route m's backend be and batch
// settings bc.
func histogramCoreOn(t *testing.T, byHand bool, be Backend, bc BatchConfig) (*Batcher, sdkmetric.Reader) {
	t.Helper()
	opts := []Option{WithRoute(Route{Name: "n", Op: OpCompletion, Backend: "be"})}
	var readerOpts []sdkmetric.ManualReaderOption
	if byHand {
		p := NewMetricsProducer()
		opts = append(opts, WithMetricsProducer(p))
		readerOpts = append(readerOpts, sdkmetric.WithProducer(p))
	}
	reader := sdkmetric.NewManualReader(readerOpts...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return newTest(t, be, 1, bc, append(opts, WithMeterProvider(mp))...), reader
}

// finishAll records the end of a call on route with priority p, error
// err, and the timings of each of durations (total) and queued.
func finishAll(b *Batcher, route string, p Priority, err error, durations, queued []time.Duration) {
	rc := (*b.routes.Load())[route]
	c := &Call{req: &Request{Route: route, Priority: p}, b: b, rc: rc, prio: p}
	for i, d := range durations {
		b.metrics.finished(c, &Result{Err: err, Timings: Timings{Total: d, Queued: queued[i]}})
	}
}

// recordEverything records through b's metrics the same measurements of
// every histogram: each bucket bound exactly (the bound's own bucket),
// one above and one below it, zero, and values past the last bound; and
// the request counts that go with them.
func recordEverything(t *testing.T, b *Batcher) {
	t.Helper()
	var durations, queued []time.Duration
	for i, s := range secondsBuckets {
		d := time.Duration(s * float64(time.Second))
		durations = append(durations, d, d+1, d-1)
		queued = append(queued, d/2, 0, time.Duration(i)*time.Microsecond)
	}
	durations = append(durations, 0, 121*time.Second, time.Hour)
	queued = append(queued, 0, time.Minute, 3*time.Hour)
	finishAll(b, "m", PriorityHigh, nil, durations, queued)
	finishAll(b, "m", PriorityLow, ErrDeadline, durations[:5], queued[:5])
	finishAll(b, "n", PriorityNormal, &UpstreamError{Class: ClassRateLimit}, durations[3:9], queued[3:9])

	run := func(route string, wait time.Duration) *batchRun {
		rc := (*b.routes.Load())[route]
		c := &Call{attempts: 1, dispatched: true, batchWait: wait}
		return &batchRun{b: b, be: rc.targets[0].be, lane: &lane{route: rc}, batch: Batch{Route: route}, calls: []*Call{c}}
	}
	var sizes []int
	for _, s := range append(sizeBuckets, tokenBuckets...) {
		sizes = append(sizes, int(s)-1, int(s), int(s)+1)
	}
	for i, n := range sizes {
		d := durations[i%len(durations)]
		out := make([]Response, n%700)
		if len(out) > 0 {
			out[0].Usage = Usage{PromptTokens: int32(n), CompletionTokens: int32(sizes[len(sizes)-1-i])}
		}
		var err error
		if i%5 == 4 {
			err = &UpstreamError{Class: ClassServer}
		}
		r := run([]string{"m", "n"}[i%2], queued[i%len(queued)])
		if i%7 == 6 { // the backend reports its calls
			r.upstreamCall(d, nil)
			r.upstreamCall(d/3, err)
		}
		b.metrics.dispatched(r, out, d, err, cost{requests: 1})
	}
	for i, s := range append(slices.Clone(ttftBuckets), tpotBuckets...) {
		d := time.Duration(s * float64(time.Second))
		rc := (*b.routes.Load())[[]string{"m", "n"}[i%2]]
		c := &Call{req: &Request{Route: rc.Name}, b: b, rc: rc}
		for j, ft := range []time.Duration{d - 1, d, d + 1} {
			b.metrics.streamed(c, &Result{Backend: "be", Usage: Usage{CompletionTokens: int32(2 + j + i%3)},
				Timings: Timings{FirstToken: ft, Total: ft + d*time.Duration(1+j+i%3)}})
		}
	}
}

// TestMetricsProducerMatchesSDK records the same measurements through the
// SDK and through a MetricsProducer and checks that a reader collects the
// same histograms from both: names, descriptions, units, value types,
// attribute sets, bounds, bucket counts, counts, sums, min and max; and
// the same request counts, which by hand the durations count.
func TestMetricsProducerMatchesSDK(t *testing.T) {
	got := map[bool]map[string]metricdata.Metrics{}
	for _, byHand := range []bool{false, true} {
		b, reader := histogramCore(t, byHand)
		recordEverything(t, b)
		got[byHand] = collect(t, reader)
	}
	for _, d := range histDefs {
		sdk, hand := got[false][d.name], got[true][d.name]
		if hand.Name != sdk.Name || hand.Description != sdk.Description || hand.Unit != sdk.Unit || sdk.Name != d.name {
			t.Errorf("%s: name, description, unit %q %q %q, want the SDK's %q %q %q", d.name, hand.Name, hand.Description, hand.Unit, sdk.Name, sdk.Description, sdk.Unit)
		}
		switch sh := sdk.Data.(type) {
		case metricdata.Histogram[float64]:
			hh, _ := hand.Data.(metricdata.Histogram[float64])
			sameHistogram(t, d.name, hh, sh)
		case metricdata.Histogram[int64]:
			hh, _ := hand.Data.(metricdata.Histogram[int64])
			sameHistogram(t, d.name, hh, sh)
		default:
			t.Errorf("%s: SDK data %T", d.name, sdk.Data)
		}
	}
	for _, name := range []string{"batcher.requests.completed", "batcher.requests.admitted", "batcher.upstream.calls"} {
		g, w := sumPoints(got[true][name].Data.(metricdata.Sum[int64])), sumPoints(got[false][name].Data.(metricdata.Sum[int64]))
		if !maps.Equal(g, w) || len(w) == 0 {
			t.Errorf("%s: %v, want the SDK's %v", name, g, w)
		}
	}
}

// sameHistogram checks that hand has the data points of sdk, sums within
// rounding (by hand, seconds are added up in nanoseconds).
func sameHistogram[N int64 | float64](t *testing.T, name string, hand, sdk metricdata.Histogram[N]) {
	t.Helper()
	if hand.Temporality != sdk.Temporality {
		t.Errorf("%s: temporality %v, want %v", name, hand.Temporality, sdk.Temporality)
	}
	want := map[string]metricdata.HistogramDataPoint[N]{}
	for _, dp := range sdk.DataPoints {
		want[fmt.Sprint(dp.Attributes.ToSlice())] = dp
	}
	if len(hand.DataPoints) != len(want) || len(want) == 0 {
		t.Errorf("%s: %d data points, want the SDK's %d", name, len(hand.DataPoints), len(want))
	}
	for _, dp := range hand.DataPoints {
		key := fmt.Sprint(dp.Attributes.ToSlice())
		w, ok := want[key]
		if !ok {
			t.Errorf("%s: data point %v not in the SDK's", name, dp.Attributes.ToSlice())
			continue
		}
		if !slices.Equal(dp.Bounds, w.Bounds) || !slices.Equal(dp.BucketCounts, w.BucketCounts) || dp.Count != w.Count {
			t.Errorf("%s %v: bounds %v counts %v count %d, want %v %v %d", name, key, dp.Bounds, dp.BucketCounts, dp.Count, w.Bounds, w.BucketCounts, w.Count)
		}
		if math.Abs(float64(dp.Sum-w.Sum)) > 1e-9*math.Max(1, float64(w.Sum)) {
			t.Errorf("%s %v: sum %v, want %v", name, key, dp.Sum, w.Sum)
		}
		if dp.Min != w.Min || dp.Max != w.Max {
			t.Errorf("%s %v: min %v max %v, want %v %v", name, key, dp.Min, dp.Max, w.Min, w.Max)
		}
	}
}

// TestHistogramIntBounds checks the integer bounds a histogram searches
// against the SDK's search of the value it would record, around every
// bound of every histogram held in integers.
func TestHistogramIntBounds(t *testing.T) {
	for _, d := range histDefs {
		if d.kind == kindFloat {
			continue
		}
		for i, ib := range d.intBounds {
			for _, v := range []int64{ib - 1, ib, ib + 1, int64(d.bounds[i] * 1e9), int64(d.bounds[i])} {
				if got, want := bucketOf(d.intBounds, v), sort.SearchFloat64s(d.bounds, d.asFloat(v)); got != want {
					t.Errorf("%s: %d in bucket %d, want the SDK's %d", d.name, v, got, want)
				}
			}
		}
	}
}

// TestMetricsProducerConcurrentSafe records from many goroutines while a
// reader collects, and checks that every measurement is counted once.
func TestMetricsProducerConcurrentSafe(t *testing.T) {
	b, reader := histogramCore(t, true)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	done := make(chan struct{})
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for {
			select {
			case <-done:
				return
			default:
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(context.Background(), &rm); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			d := make([]time.Duration, each)
			for i := range d {
				d[i] = time.Duration(w*each+i) * time.Millisecond
			}
			finishAll(b, "m", Priority(w%numPriorities), nil, d, d)
		})
	}
	wg.Wait()
	close(done)
	<-collected
	var n uint64
	var sum float64
	for _, dp := range collect(t, reader)[histDuration.name].Data.(metricdata.Histogram[float64]).DataPoints {
		n += dp.Count
		sum += dp.Sum
	}
	if n != workers*each {
		t.Errorf("count %d, want %d", n, workers*each)
	}
	total := workers * each
	if want := float64(total*(total-1)/2) / 1000; math.Abs(sum-want) > 1e-6 {
		t.Errorf("sum %v, want %v", sum, want)
	}
}

// TestMetricsProducerAddsCores checks that two cores on one producer add
// up, as two cores on one MeterProvider do.
func TestMetricsProducerAddsCores(t *testing.T) {
	p := NewMetricsProducer()
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(p))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	for _, d := range []time.Duration{time.Millisecond, time.Second} {
		b := newTest(t, &fakeBackend{}, 1, BatchConfig{}, WithMeterProvider(mp), WithMetricsProducer(p))
		finishAll(b, "m", PriorityHigh, nil, []time.Duration{d}, []time.Duration{d})
	}
	dps := collect(t, reader)[histDuration.name].Data.(metricdata.Histogram[float64]).DataPoints
	if len(dps) != 1 {
		t.Fatalf("%d data points, want 1", len(dps))
	}
	if dp := dps[0]; dp.Count != 2 || math.Abs(dp.Sum-1.001) > 1e-12 {
		t.Errorf("count %d sum %v, want 2 and 1.001", dp.Count, dp.Sum)
	}
	if lo, _ := dps[0].Min.Value(); lo != 0.001 {
		t.Errorf("min %v, want 0.001", lo)
	}
	if hi, _ := dps[0].Max.Value(); hi != 1 {
		t.Errorf("max %v, want 1", hi)
	}
}
