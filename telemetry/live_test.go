package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/batcherhq/batcher/batcher"
)

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("k", "v")
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "with span")
	span.End()
	log.InfoContext(context.Background(), "without span")
	log.Info("no context")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var with, without map[string]any
	_ = json.Unmarshal(lines[0], &with)
	_ = json.Unmarshal(lines[1], &without)
	sc := span.SpanContext()
	if with["trace_id"] != sc.TraceID().String() || with["span_id"] != sc.SpanID().String() || with["k"] != "v" {
		t.Errorf("record with a span: %s", lines[0])
	}
	if _, ok := without["trace_id"]; ok {
		t.Errorf("record without a span carries a trace id: %s", lines[1])
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{0.1, 0.2, 0.4}
	for _, tc := range []struct {
		counts []uint64
		q      float64
		want   time.Duration
	}{
		{[]uint64{0, 0, 0, 0}, 0.5, 0},
		{[]uint64{10, 0, 0, 0}, 0.5, 50 * time.Millisecond},  // halfway into [0, 0.1]
		{[]uint64{0, 10, 0, 0}, 0.5, 150 * time.Millisecond}, // halfway into [0.1, 0.2]
		{[]uint64{5, 0, 5, 0}, 0.95, 380 * time.Millisecond},
		{[]uint64{0, 0, 0, 4}, 0.5, 400 * time.Millisecond}, // +Inf: its lower bound
	} {
		if got := quantile(bounds, tc.counts, tc.q); (got - tc.want).Abs() > time.Millisecond {
			t.Errorf("quantile(%v, %v) = %v, want %v", tc.counts, tc.q, got, tc.want)
		}
	}
}

// newCore returns a core with metrics on reader, an instant backend and a
// 600 RPM budget.
func newCore(t *testing.T, reader sdkmetric.Reader) *batcher.Batcher {
	t.Helper()
	be := batcher.BackendFunc(func(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
		for i := range out {
			out[i] = batcher.Response{Text: "ok", Usage: batcher.Usage{PromptTokens: 3, CompletionTokens: 2}, FinishReason: batcher.FinishStop}
		}
		return nil
	})
	b, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be, RPM: 600, TPM: 60000}),
		batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "be", Batch: batcher.BatchConfig{MaxBatchSize: 4, MinBatchSize: 4}}),
		batcher.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

func TestSamplerDerivesRatesFromMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	b := newCore(t, exp)
	jobs := []Job{{ID: "j1", Name: "nightly", State: "running", Total: 100, Succeeded: 10}}
	s := NewSampler(Sources{
		Lanes: b.Lanes, Backends: b.Stats, Limits: b.BackendLimits,
		Streams: func() Streams { return Streams{Open: 2, Buffered: 5} },
		Jobs:    func() []Job { return jobs },
		Metrics: reg,
	}, time.Second, 3)
	t0 := time.Now()
	first := s.Sample(t0)
	if first.Requests.Completed != 0 || len(first.Backends) != 1 || first.Backends[0].RPMMax != 600 || first.Backends[0].Breaker != "closed" {
		t.Fatalf("first snapshot %+v", first)
	}
	var calls []*batcher.Call
	for i := range 8 {
		r := &batcher.Request{ID: fmt.Sprint(i), Route: "m", Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "p"}}
		c, err := b.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for _, c := range calls {
		if err := c.Result().Err; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Submit(context.Background(), &batcher.Request{Route: "nope"}); err == nil {
		t.Fatal("unknown route admitted")
	}
	jobs[0].Succeeded, jobs[0].Tokens = 30, 400
	snap := s.Sample(t0.Add(2 * time.Second))
	r := snap.Requests
	if r.Admitted != 8 || r.Completed != 8 || r.Rejected != 1 || r.Failed != 0 {
		t.Errorf("requests %+v", r)
	}
	if r.PerSec != 4 { // 8 over 2 s
		t.Errorf("per second %v, want 4", r.PerSec)
	}
	if r.TokensPerSec != 20 { // 8 × 5 tokens over 2 s
		t.Errorf("tokens per second %v, want 20", r.TokensPerSec)
	}
	if r.P50 <= 0 || r.P95 < r.P50 {
		t.Errorf("latency p50 %v p95 %v", r.P50, r.P95)
	}
	be := snap.Backends[0]
	if be.Items != 8 || be.Calls != 2 {
		t.Errorf("backend %+v", be)
	}
	if be.RPMUsed != 60 { // 2 calls over 2 s, scaled to a minute
		t.Errorf("RPM used %v, want 60", be.RPMUsed)
	}
	if snap.Streams != (Streams{Open: 2, Buffered: 5}) {
		t.Errorf("streams %+v", snap.Streams)
	}
	j := snap.Jobs[0]
	if j.ItemsPerSec != 10 || j.TokensPerSec != 200 || j.ETA != 7*time.Second {
		t.Errorf("job %+v, want 10 items/s, 200 tokens/s, ETA 7s", j)
	}
	// History is bounded; Next returns a newer snapshot at once.
	s.Sample(t0.Add(3 * time.Second))
	s.Sample(t0.Add(4 * time.Second))
	if h := s.History(); len(h) != 3 || !h[0].Time.Equal(t0.Add(2*time.Second)) {
		t.Errorf("history of %d from %v, want 3 from +2s", len(h), h[0].Time)
	}
	latest, seq := s.Latest()
	got, n, err := s.Next(context.Background(), seq-1)
	if err != nil || n != seq || !got.Time.Equal(latest.Time) {
		t.Errorf("Next(seq-1) = %v, %d, %v", got.Time, n, err)
	}
}

// A backend's batch-API traffic (the jobs' upstream batches, outside the
// core) shows beside its online calls, from the series the jobs package
// records: named here as it names them, so that a rename there fails.
func TestSamplerCountsBatchAPITraffic(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	b := newCore(t, sdkmetric.NewManualReader())
	mt := mp.Meter("github.com/batcherhq/batcher/jobs")
	batches, _ := mt.Int64Counter("batcher.upstream.batch_api.batches", metric.WithUnit("{batch}"))
	requests, _ := mt.Int64Counter("batcher.upstream.batch_api.requests", metric.WithUnit("{request}"))
	for _, c := range []struct {
		backend string
		n       int64
	}{{"be", 100}, {"be", 100}, {"be", 100}, {"other", 7}} {
		attrs := metric.WithAttributes(attribute.String("batcher.backend", c.backend), attribute.String("batcher.route", "m"))
		batches.Add(context.Background(), 1, attrs)
		requests.Add(context.Background(), c.n, attrs)
	}
	s := NewSampler(Sources{Lanes: b.Lanes, Backends: b.Stats, Metrics: reg}, time.Second, 0)
	be := s.Sample(time.Now()).Backends[0]
	if be.Name != "be" || be.BatchAPIBatches != 3 || be.BatchAPIRequests != 300 || be.Calls != 0 || be.Items != 0 {
		t.Errorf("backend %+v: want 3 batch-API batches of 300 requests beside 0 online calls", be)
	}
}

func TestSamplerStartStopAndNext(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	b := newCore(t, reader)
	s := NewSampler(Sources{Lanes: b.Lanes, Backends: b.Stats}, 10*time.Millisecond, 0)
	s.Start()
	_, seq := s.Latest()
	if seq == 0 {
		t.Fatal("Start took no first snapshot")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, n, err := s.Next(ctx, seq); err != nil || n <= seq {
		t.Fatalf("Next: %d, %v", n, err)
	}
	s.Stop()
	s.Stop() // idempotent
	if _, _, err := s.Next(ctx, 1<<60); err == nil {
		t.Fatal("Next after Stop did not end")
	}
}

func TestRegisterLive(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	jobs := []Job{{ID: "a", State: "running", Succeeded: 3, Failed: 1, Tokens: 50}, {ID: "b", State: "done", Succeeded: 5}, {ID: "c", State: "weird"}}
	if _, err := RegisterLive(mp, Sources{Streams: func() Streams { return Streams{Open: 3, Buffered: 7} }, Jobs: func() []Job { return jobs },
		JobStates: []string{"queued", "running", "done", "failed", "cancelled"}}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, p := range m.Data.(metricdata.Gauge[int64]).DataPoints {
			key := m.Name
			if v, ok := p.Attributes.Value("batcher.job.state"); ok {
				key += "/" + v.AsString()
			}
			got[key] = p.Value
		}
	}
	want := map[string]int64{"batcher.streams.open": 3, "batcher.streams.buffered": 7, "batcher.jobs/running": 1, "batcher.jobs/done": 1,
		"batcher.jobs/queued": 0, "batcher.jobs/failed": 0, "batcher.jobs/cancelled": 0, "batcher.job.items": 9, "batcher.job.tokens": 50}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if _, ok := got["batcher.jobs/weird"]; ok {
		t.Error("a state outside JobStates became a series")
	}
}
