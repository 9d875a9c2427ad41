package batcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// collect reads every metric the reader holds, by name.
func collect(t *testing.T, r sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// meterFor returns a reader and the option that makes a core record its
// metrics for it: through the SDK, or with byHand its histograms counted
// for a MetricsProducer, as batcherd runs.
func meterFor(t *testing.T, byHand bool) (sdkmetric.Reader, Option) {
	t.Helper()
	var p *MetricsProducer
	var readerOpts []sdkmetric.ManualReaderOption
	if byHand {
		p = NewMetricsProducer()
		readerOpts = append(readerOpts, sdkmetric.WithProducer(p))
	}
	reader := sdkmetric.NewManualReader(readerOpts...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return reader, func(c *config) {
		WithMeterProvider(mp)(c)
		WithMetricsProducer(p)(c)
	}
}

// bothWays runs test through the SDK and by hand.
func bothWays(t *testing.T, test func(t *testing.T, byHand bool)) {
	for _, byHand := range []bool{false, true} {
		t.Run(fmt.Sprintf("byHand=%v", byHand), func(t *testing.T) { test(t, byHand) })
	}
}

// points returns a metric's data points as attribute-set strings mapped to
// their value: the sum for counters and gauges, the count for histograms.
func points(t *testing.T, m metricdata.Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	key := func(s attribute.Set) string {
		var parts []string
		for _, kv := range s.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return strings.Join(parts, ",")
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = p.Value
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = float64(p.Count)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = float64(p.Count)
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return out
}

func TestMetricsRecordRequestsBatchesAndUpstream(t *testing.T) {
	bothWays(t, testMetricsRecordRequestsBatchesAndUpstream)
}

func testMetricsRecordRequestsBatchesAndUpstream(t *testing.T, byHand bool) {
	reader, mp := meterFor(t, byHand)
	be := &fakeBackend{hold: make(chan struct{}), started: make(chan *Batch, 2)}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 4, MinBatchSize: 4}, mp)

	var calls []*Call
	for i := range 4 {
		calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityHigh)))
	}
	<-be.started // held upstream: four in flight, none queued
	if l := b.Lanes(); len(l) != 1 || l[0].InFlight != 4 {
		t.Errorf("lanes %+v, want one with 4 in flight", l)
	}
	queued := submit(t, b, req("q", PriorityLow))
	got := collect(t, reader)
	if v := points(t, got["batcher.queue.depth"])["batcher.backend=be,batcher.priority=low,batcher.route=m"]; v != 1 {
		t.Errorf("queue depth low = %v, want 1: %v", v, points(t, got["batcher.queue.depth"]))
	}
	if v := points(t, got["batcher.backend.in_flight"])["batcher.backend=be"]; v != 1 {
		t.Errorf("backend in flight = %v, want 1", v)
	}
	close(be.hold)
	for _, c := range append(calls, queued) {
		<-c.Done()
		wantOK(t, c)
	}
	if _, err := b.Submit(context.Background(), &Request{Route: "nope"}); err == nil {
		t.Fatal("unknown route admitted")
	}

	got = collect(t, reader)
	for name, want := range map[string]map[string]float64{
		"batcher.requests.admitted": {
			"batcher.priority=high,batcher.route=m": 4,
			"batcher.priority=low,batcher.route=m":  1,
		},
		"batcher.requests.completed": {
			"batcher.outcome=ok,batcher.priority=high,batcher.route=m": 4,
			"batcher.outcome=ok,batcher.priority=low,batcher.route=m":  1,
		},
		"batcher.requests.rejected": {
			"batcher.priority=normal,batcher.reason=invalid,batcher.route=unknown": 1,
		},
		"batcher.request.duration": {
			"batcher.outcome=ok,batcher.priority=high,batcher.route=m": 4,
			"batcher.outcome=ok,batcher.priority=low,batcher.route=m":  1,
		},
		"batcher.request.queue_wait": {"batcher.priority=high,batcher.route=m": 4, "batcher.priority=low,batcher.route=m": 1},
		"batcher.batch.size":         {"batcher.backend=be,batcher.route=m": 2},
		"batcher.batch.wait":         {"batcher.route=m": 2},
		"batcher.upstream.calls":     {"batcher.backend=be,batcher.outcome=ok": 2},
		"gen_ai.client.operation.duration": {
			"batcher.backend=be,gen_ai.operation.name=text_completion,gen_ai.provider.name=be,gen_ai.request.model=m": 2,
		},
		"gen_ai.client.token.usage": {
			"batcher.backend=be,gen_ai.operation.name=text_completion,gen_ai.provider.name=be,gen_ai.request.model=m,gen_ai.token.type=input":  2, // one per upstream call
			"batcher.backend=be,gen_ai.operation.name=text_completion,gen_ai.provider.name=be,gen_ai.request.model=m,gen_ai.token.type=output": 2,
		},
		"batcher.upstream.requests":         {"batcher.backend=be": 5},
		"batcher.upstream.calls_saved":      {"batcher.backend=be": 3},
		"batcher.budget.requests.used":      {"batcher.backend=be": 2},
		"batcher.breaker.state":             {"batcher.backend=be,batcher.breaker.state=closed": 1, "batcher.backend=be,batcher.breaker.state=open": 0, "batcher.backend=be,batcher.breaker.state=half_open": 0},
		"batcher.backend.concurrency.limit": {"batcher.backend=be": 1},
	} {
		m, ok := got[name]
		if !ok {
			t.Errorf("%s: not recorded", name)
			continue
		}
		pts := points(t, m)
		for k, v := range want {
			if pts[k] != v {
				t.Errorf("%s{%s} = %v, want %v (all: %v)", name, k, pts[k], v, pts)
			}
		}
	}
	fill := got["batcher.batch.fill_ratio"].Data.(metricdata.Histogram[float64]).DataPoints[0]
	if fill.Sum != 1.25 { // 4/4 + 1/4
		t.Errorf("fill ratio sum %v, want 1.25", fill.Sum)
	}
}

// A batch's fill ratio is of the max batch size it was cut under: after
// SetRoutes changes the size, the route's next batches count against the
// new one, not the size the route's series were made with.
func TestMetricsFillRatioFollowsSetRoutes(t *testing.T) {
	bothWays(t, testMetricsFillRatioFollowsSetRoutes)
}

func testMetricsFillRatioFollowsSetRoutes(t *testing.T, byHand bool) {
	reader, mp := meterFor(t, byHand)
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 4, MinBatchSize: 4}, mp)
	run := func(n int) {
		t.Helper()
		var calls []*Call
		for i := range n {
			calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityNormal)))
		}
		for _, c := range calls {
			<-c.Done()
			wantOK(t, c)
		}
	}
	run(4) // one full batch of 4
	if err := b.SetRoutes(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 2, MinBatchSize: 2}}); err != nil {
		t.Fatal(err)
	}
	run(2) // one full batch of 2
	fill := collect(t, reader)["batcher.batch.fill_ratio"].Data.(metricdata.Histogram[float64]).DataPoints[0]
	if fill.Count != 2 || fill.Sum != 2 { // 4/4 + 2/2
		t.Errorf("fill ratio count %d sum %v, want 2 full batches (sum 2)", fill.Count, fill.Sum)
	}
}

func TestMetricsOutcomes(t *testing.T) { bothWays(t, testMetricsOutcomes) }

func testMetricsOutcomes(t *testing.T, byHand bool) {
	reader, mp := meterFor(t, byHand)
	// x's call is held upstream until x has been cancelled, so that x ends
	// cancelled whether or not it left before the cancel.
	release := make(chan struct{})
	be := &fakeBackend{fail: func(b *Batch, out []Response) error {
		if b.Requests[0].ID == "x" {
			<-release
		}
		return &UpstreamError{Class: ClassAuth, Message: "no"}
	}}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1}, mp)
	a := submit(t, b, req("a", PriorityNormal))
	if err := a.Result().Err; ClassOf(err) != ClassAuth { // not retried
		t.Fatalf("err %v, want an auth failure", err)
	}
	c := submit(t, b, &Request{ID: "x", Route: "m", Priority: PriorityDeferrable, Input: Input{Op: OpCompletion, Prompt: "p"}})
	c.Cancel()
	<-c.Done()
	close(release)
	pts := points(t, collect(t, reader)["batcher.requests.completed"])
	if pts["batcher.outcome=auth,batcher.priority=normal,batcher.route=m"] != 1 {
		t.Errorf("auth failure not counted: %v", pts)
	}
	if pts["batcher.outcome=canceled,batcher.priority=deferrable,batcher.route=m"] != 1 {
		t.Errorf("cancellation not counted: %v", pts)
	}
	calls := points(t, collect(t, reader)["batcher.upstream.calls"])
	if calls["batcher.backend=be,batcher.outcome=auth"] < 1 { // the cancelled one may have gone too
		t.Errorf("upstream auth failure not counted: %v", calls)
	}
}

// TestMetricsCardinalityBounded sends requests with distinct ids, prompts,
// temperatures (a lane each) and unknown routes: no attribute value may
// carry any of them, and the number of series stays within what the
// configuration allows.
func TestMetricsCardinalityBounded(t *testing.T) { bothWays(t, testMetricsCardinalityBounded) }

func testMetricsCardinalityBounded(t *testing.T, byHand bool) {
	reader, mp := meterFor(t, byHand)
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}, MaxConcurrency: 4}),
		WithRoute(Route{Name: "m", Op: OpChat, Backend: "be", Batch: BatchConfig{MaxBatchSize: 8, Window: 1e6}}),
		mp)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	var calls []*Call
	for i := range 300 {
		temp := float32(i) / 300
		r := &Request{ID: fmt.Sprintf("secret-id-%d", i), Route: "m", Priority: Priority(i % numPriorities),
			Input: Input{Op: OpChat, Messages: []Message{{Role: "user", Content: fmt.Sprintf("secret-prompt-%d", i)}}}, Params: Params{Temperature: &temp}}
		c, err := b.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
		_, _ = b.Submit(context.Background(), &Request{ID: "x", Route: fmt.Sprintf("secret-route-%d", i)})
	}
	if len(b.Lanes()) < 100 {
		t.Fatalf("only %d lanes: the test wants many", len(b.Lanes()))
	}
	check := func() {
		for name, m := range collect(t, reader) {
			pts := points(t, m)
			// route × priority × outcome is the largest product.
			if len(pts) > numPriorities*numOutcomes {
				t.Errorf("%s: %d series", name, len(pts))
			}
			for k := range pts {
				if strings.Contains(k, "secret") {
					t.Errorf("%s: attribute set %q carries a caller's string", name, k)
				}
			}
		}
	}
	check()
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		<-c.Done()
	}
	check()
}

func TestSpansCarryGenAIAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	be := &fakeBackend{}
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: be}),
		WithRoute(Route{Name: "m", Op: OpChat, Backend: "be", Model: "gpt-x", Batch: BatchConfig{MaxBatchSize: 2, MinBatchSize: 2}}),
		WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	temp, topP := float32(0.5), float32(0.9)
	var calls []*Call
	for i := range 2 {
		r := &Request{ID: fmt.Sprint(i), Route: "m", Input: Input{Op: OpChat, Messages: []Message{{Role: "user", Content: "hi"}}},
			Params: Params{MaxTokens: 64, Temperature: &temp, TopP: &topP}}
		calls = append(calls, submit(t, b, r))
	}
	for _, c := range calls {
		if err := c.Result().Err; err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]any{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "be", "gen_ai.request.model": "gpt-x",
		"gen_ai.request.max_tokens": int64(64), "gen_ai.request.temperature": 0.5, "gen_ai.request.top_p": float64(float32(0.9)),
		"gen_ai.usage.input_tokens": int64(1), "gen_ai.usage.output_tokens": int64(1),
	}
	var sawReq, sawBatch bool
	for _, s := range rec.Ended() {
		attrs := map[string]any{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.AsInterface()
		}
		switch s.Name() {
		case "batcher.request m":
			sawReq = true
			var attempt bool
			for _, ev := range s.Events() {
				for _, a := range ev.Attributes {
					if ev.Name == "batcher.dispatch" && a.Key == attrAttempt && a.Value.AsInt64() == 1 {
						attempt = true
					}
				}
			}
			if !attempt {
				t.Errorf("request span lacks a batcher.dispatch event with attempt 1: %v", s.Events())
			}
		case "batcher.batch m":
			sawBatch = true
			want["gen_ai.usage.input_tokens"], want["gen_ai.usage.output_tokens"] = int64(2), int64(2)
		default:
			continue
		}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("%s: %s = %v (%T), want %v", s.Name(), k, attrs[k], attrs[k], v)
			}
		}
		want["gen_ai.usage.input_tokens"], want["gen_ai.usage.output_tokens"] = int64(1), int64(1)
	}
	if !sawReq || !sawBatch {
		t.Fatalf("spans: request %v, batch %v", sawReq, sawBatch)
	}
}

// A request TrySubmit's caller keeps (a job's backlog) is not a rejection
// when the queue is full: it counts in batcher.requests.deferred, and
// Submit's refusals still count in batcher.requests.rejected.
func TestTrySubmitRefusalIsDeferredNotRejected(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	be := &fakeBackend{hold: make(chan struct{})}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithMeterProvider(mp), WithQueueCapacity(1), WithQueueReserve(0))
	held := submit(t, b, req("a", PriorityHigh))
	if _, err := b.Submit(context.Background(), req("b", PriorityHigh)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Submit on a full queue: %v, want ErrQueueFull", err)
	}
	for range 3 {
		if _, err := b.TrySubmit(context.Background(), req("c", PriorityDeferrable)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("TrySubmit on a full queue: %v, want ErrQueueFull", err)
		}
	}
	close(be.hold)
	<-held.Done()
	c, err := b.TrySubmit(context.Background(), req("d", PriorityDeferrable))
	if err != nil {
		t.Fatalf("TrySubmit once the queue has room: %v", err)
	}
	<-c.Done()
	wantOK(t, c)

	got := collect(t, reader)
	if pts := points(t, got["batcher.requests.rejected"]); len(pts) != 1 || pts["batcher.priority=high,batcher.reason=queue_full,batcher.route=m"] != 1 {
		t.Errorf("batcher.requests.rejected = %v, want only Submit's one queue_full", pts)
	}
	if pts := points(t, got["batcher.requests.deferred"]); len(pts) != 1 || pts["batcher.priority=deferrable,batcher.reason=queue_full,batcher.route=m"] != 3 {
		t.Errorf("batcher.requests.deferred = %v, want TrySubmit's 3 queue_full", pts)
	}
	if pts := points(t, got["batcher.requests.admitted"]); pts["batcher.priority=deferrable,batcher.route=m"] != 1 {
		t.Errorf("batcher.requests.admitted = %v, want TrySubmit's admission counted", pts)
	}
}

// fanOutBackend makes one upstream call per request and reports each
// (Batch.UpstreamCall); requests whose prompt says "bad" fail.
type fanOutBackend struct{}

func (fanOutBackend) Dispatch(_ context.Context, b *Batch, out []Response) error {
	for i, r := range b.Requests {
		var err error
		if strings.Contains(r.Input.Prompt, "bad") {
			err = &UpstreamError{Class: ClassInvalidRequest, StatusCode: 400, Message: "bad"}
			out[i].Err = err
		} else {
			out[i].Text, out[i].Usage = "ok", Usage{PromptTokens: 1, CompletionTokens: 1}
		}
		b.UpstreamCall(time.Millisecond, err)
	}
	return nil
}

// A batch that goes upstream as one call per request counts as that many
// calls, each with its own outcome, and saves none.
func TestMetricsCountEachUpstreamCallOfAFanOut(t *testing.T) {
	bothWays(t, testMetricsCountEachUpstreamCallOfAFanOut)
}

func testMetricsCountEachUpstreamCallOfAFanOut(t *testing.T, byHand bool) {
	reader, mp := meterFor(t, byHand)
	b := newTest(t, fanOutBackend{}, 1, BatchConfig{MaxBatchSize: 4, MinBatchSize: 4}, mp)
	var calls []*Call
	for _, id := range []string{"a", "b", "bad", "c"} {
		calls = append(calls, submit(t, b, req(id, PriorityHigh)))
	}
	for _, c := range calls {
		<-c.Done()
	}
	got := collect(t, reader)
	var ok, failed float64
	for k, v := range points(t, got["batcher.upstream.calls"]) {
		if strings.Contains(k, "batcher.outcome=ok") {
			ok += v
		} else {
			failed += v
		}
	}
	if ok != 3 || failed != 1 {
		t.Errorf("batcher.upstream.calls: %v ok, %v failed, want 3 and 1 (%v)", ok, failed, points(t, got["batcher.upstream.calls"]))
	}
	var durOK, durFailed float64
	for k, v := range points(t, got["gen_ai.client.operation.duration"]) {
		if strings.Contains(k, "error.type=") {
			durFailed += v
		} else {
			durOK += v
		}
	}
	if durOK != 3 || durFailed != 1 {
		t.Errorf("gen_ai.client.operation.duration: %v ok, %v with an error.type, want 3 and 1 (%v)", durOK, durFailed, points(t, got["gen_ai.client.operation.duration"]))
	}
	if v := points(t, got["batcher.upstream.calls_saved"])["batcher.backend=be"]; v != 0 {
		t.Errorf("batcher.upstream.calls_saved = %v, want 0: a fan-out saves no call", v)
	}
	if st := b.Stats(); len(st) != 1 || st[0].Calls != 4 || st[0].Items != 4 {
		t.Errorf("backend stats %+v, want 4 calls carrying 4 requests", st)
	}
}

// Every refusal an operator should see is a rejection with its reason: a
// door's access refusals through Batcher.Admit (a route the tenant may not
// use, a priority over its ceiling, a revoked credential) and Submit's
// quota refusals, not "error" and not missing.
func TestMetricsRejectionReasons(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	be := &fakeBackend{hold: make(chan struct{})}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1}, WithMeterProvider(mp))
	if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{InFlight: 1}}}); err != nil {
		t.Fatal(err)
	}
	revoked := make(chan struct{})
	close(revoked)
	refusals := []struct {
		name string
		a    *Access
		r    *Request
		want error
	}{
		{"route", &Access{Tenant: "a", Routes: []string{"other"}, MaxPriority: PriorityUrgent}, req("x", PriorityNormal), ErrForbidden},
		{"priority", &Access{Tenant: "a", MaxPriority: PriorityNormal, PriorityMode: PriorityRefuse}, req("y", PriorityHigh), ErrForbidden},
		{"revoked", &Access{Tenant: "a", MaxPriority: PriorityUrgent, Revoked: revoked}, req("z", PriorityNormal), ErrRevoked},
	}
	for _, c := range refusals {
		if err := b.Admit(c.a, c.r); !errors.Is(err, c.want) {
			t.Fatalf("%s: Admit = %v, want %v", c.name, err, c.want)
		}
	}
	held := submit(t, b, treq("a", "1"))
	if _, err := b.Submit(context.Background(), treq("a", "2")); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("second of tenant a: %v, want ErrQuotaExceeded", err)
	}
	close(be.hold)
	<-held.Done()
	wantOK(t, held)

	got := points(t, collect(t, reader)["batcher.requests.rejected"])
	want := map[string]float64{
		"batcher.priority=normal,batcher.reason=forbidden,batcher.route=m": 1,
		"batcher.priority=high,batcher.reason=forbidden,batcher.route=m":   1,
		"batcher.priority=normal,batcher.reason=revoked,batcher.route=m":   1,
		"batcher.priority=normal,batcher.reason=quota,batcher.route=m":     1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("batcher.requests.rejected =\n %v\nwant\n %v", got, want)
	}
}
