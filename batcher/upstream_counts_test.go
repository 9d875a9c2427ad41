package batcher

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestUpstreamCountsMatchSDK makes the same upstream calls and budget use
// count in the core (atomics observed at collection) and in the
// synchronous SDK counters they replace, and compares what a reader sees:
// name, description, unit, temporality, monotonicity and every data point,
// zeros included. Routes m and n share backend be, so that their counts
// add up in one series.
func TestUpstreamCountsMatchSDK(t *testing.T) {
	b, reader := histogramCore(t, false)
	refReader := sdkmetric.NewManualReader()
	refMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(refReader))
	t.Cleanup(func() { _ = refMP.Shutdown(context.Background()) })
	mt := refMP.Meter(meterName)
	ref := map[string]metric.Int64Counter{}
	for _, d := range [][3]string{
		{"batcher.upstream.calls", "{call}", "Upstream calls (HTTP requests: one per batch, per request of a fan-out, per pack), by backend and outcome."},
		{"batcher.budget.requests.used", "{request}", "Upstream requests spent against the backend's RPM budget."},
		{"batcher.budget.tokens.used", "{token}", "Tokens spent against the backend's TPM budget (reported usage, else the reservation)."},
	} {
		c, err := mt.Int64Counter(d[0], metric.WithUnit(d[1]), metric.WithDescription(d[2]))
		if err != nil {
			t.Fatal(err)
		}
		ref[d[0]] = c
	}
	be := keyBackend.String("be")
	ctx := context.Background()
	refCall := func(err error) {
		ref["batcher.upstream.calls"].Add(ctx, 1, metric.WithAttributes(be, keyOutcome.String(outcomeNames[outcomeOf(err)])))
	}
	run := func(route string) *batchRun {
		rc := (*b.routes.Load())[route]
		return &batchRun{b: b, be: rc.targets[0].be, lane: &lane{route: rc}, batch: Batch{Route: route}}
	}
	for i, ob := range []struct {
		route    string
		err      error
		used     cost
		reported []error // calls the backend reported (Batch.UpstreamCall)
	}{
		{route: "m", used: cost{}}, // a series at 0
		{route: "m", used: cost{requests: 1, tokens: 480}},
		{route: "n", err: ErrDeadline, used: cost{requests: 1}},
		{route: "n", err: &UpstreamError{Class: ClassRateLimit}, used: cost{requests: 2, tokens: 7}},
		{route: "m", used: cost{requests: 3, tokens: 90}, reported: []error{nil, &UpstreamError{Class: ClassServer}, nil}},
	} {
		r := run(ob.route)
		for _, err := range ob.reported {
			r.upstreamCall(time.Millisecond, err)
			refCall(err)
		}
		b.metrics.dispatched(r, make([]Response, i+1), 10*time.Millisecond, ob.err, ob.used)
		if len(ob.reported) == 0 {
			refCall(ob.err)
		}
		ref["batcher.budget.requests.used"].Add(ctx, int64(ob.used.requests), metric.WithAttributes(be))
		ref["batcher.budget.tokens.used"].Add(ctx, int64(ob.used.tokens), metric.WithAttributes(be))
	}
	got, want := collect(t, reader), collect(t, refReader)
	for name := range ref {
		g, w := got[name], want[name]
		if g.Name != w.Name || g.Description != w.Description || g.Unit != w.Unit {
			t.Errorf("%s: name, description, unit %q %q %q, want the SDK's %q %q %q", name, g.Name, g.Description, g.Unit, w.Name, w.Description, w.Unit)
		}
		gs, ok1 := g.Data.(metricdata.Sum[int64])
		ws, ok2 := w.Data.(metricdata.Sum[int64])
		if !ok1 || !ok2 {
			t.Fatalf("%s: data %T, want the SDK's %T", name, g.Data, w.Data)
		}
		if gs.Temporality != ws.Temporality || gs.IsMonotonic != ws.IsMonotonic {
			t.Errorf("%s: temporality %v monotonic %v, want %v %v", name, gs.Temporality, gs.IsMonotonic, ws.Temporality, ws.IsMonotonic)
		}
		if gp, wp := sumPoints(gs), sumPoints(ws); !maps.Equal(gp, wp) || len(wp) == 0 {
			t.Errorf("%s: %v, want the SDK's %v", name, gp, wp)
		}
	}
}

func sumPoints(s metricdata.Sum[int64]) map[string]int64 {
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		out[fmt.Sprint(dp.Attributes.ToSlice())] = dp.Value
	}
	return out
}

// TestAbandonedCallCountedCanceled: an upstream call that ends with the
// context's cancellation (a streamed answer whose caller left) is counted
// with outcome and error.type "canceled", not "error".
func TestAbandonedCallCountedCanceled(t *testing.T) {
	b, reader := histogramCore(t, false)
	rc := (*b.routes.Load())["n"]
	r := &batchRun{b: b, be: rc.targets[0].be, lane: &lane{route: rc}, batch: Batch{Route: "n"}}
	r.upstreamCall(time.Millisecond, fmt.Errorf("sim: stream: %w", context.Canceled))
	got := collect(t, reader)
	calls := map[string]int64{}
	for _, dp := range got["batcher.upstream.calls"].Data.(metricdata.Sum[int64]).DataPoints {
		o, _ := dp.Attributes.Value(keyOutcome)
		calls[o.AsString()] += dp.Value
	}
	durs := map[string]uint64{}
	for _, dp := range got["gen_ai.client.operation.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
		o, _ := dp.Attributes.Value(keyErrType)
		durs[o.AsString()] += dp.Count
	}
	if calls["canceled"] != 1 || calls["error"] != 0 || durs["canceled"] != 1 || durs["error"] != 0 {
		t.Errorf("upstream calls by outcome %v, operation durations by error.type %v: want the call canceled", calls, durs)
	}
}
