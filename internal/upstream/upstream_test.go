package upstream_test

import (
	"context"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/batcherhq/batcher/internal/upstream"
)

func TestLogLimiter(t *testing.T) {
	l := upstream.NewLogLimiter(time.Second)
	t0 := time.Unix(0, 0)
	if ok, n := l.Allow("a", t0); !ok || n != 0 {
		t.Fatal("first record held back")
	}
	for range 3 {
		if ok, _ := l.Allow("a", t0.Add(time.Millisecond)); ok {
			t.Fatal("repeat let through within the interval")
		}
	}
	if ok, _ := l.Allow("b", t0); !ok {
		t.Fatal("another key held back")
	}
	if ok, n := l.Allow("a", t0.Add(time.Second)); !ok || n != 3 {
		t.Fatalf("after the interval: %v, %d suppressed; want true, 3", ok, n)
	}
}

// seenBy is a RoundTripper that keeps the requests it is given and
// answers 200.
type seenBy struct{ reqs []*http.Request }

func (s *seenBy) RoundTrip(r *http.Request) (*http.Response, error) {
	s.reqs = append(s.reqs, r)
	if r.Body != nil {
		_ = r.Body.Close() // as a transport does: otelhttp records its metrics then
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: make(http.Header), Request: r}, nil
}

// TestClientTracesOnlyWhatCounts: a call whose context
// holds no trace and whose client has no tracer provider that could start
// one skips otelhttp (the transport gets the caller's request, not
// otelhttp's clone); a call within a trace, sampled or not, still gets its
// client span and carries traceparent; a client with a recording provider
// still makes root spans. A global MeterProvider that records (batcherd
// always sets one) changes none of it: the client records no metrics.
func TestClientTracesOnlyWhatCounts(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	defer otel.SetMeterProvider(metricnoop.NewMeterProvider())
	prop := propagation.TraceContext{}
	get := func(t *testing.T, c *http.Client, ctx context.Context) *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://upstream.test/v1/chat", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return req
	}
	t.Run("no trace", func(t *testing.T) {
		for _, tp := range []trace.TracerProvider{nil, tracenoop.NewTracerProvider()} {
			base := &seenBy{}
			req := get(t, upstream.NewClient(base, "openai", prop, tp), context.Background())
			if len(base.reqs) != 1 || base.reqs[0] != req {
				t.Fatalf("tp %T: the call went through otelhttp", tp)
			}
			if h := base.reqs[0].Header.Get("traceparent"); h != "" {
				t.Fatalf("tp %T: traceparent %q without a trace", tp, h)
			}
		}
	})
	t.Run("within a trace", func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		for _, sampled := range []bool{true, false} {
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
			if sampled {
				sc = sc.WithTraceFlags(trace.FlagsSampled)
			}
			base := &seenBy{}
			get(t, upstream.NewClient(base, "openai", prop, tp), trace.ContextWithSpanContext(context.Background(), sc))
			h := base.reqs[0].Header.Get("traceparent")
			if !strings.HasPrefix(h, "00-"+sc.TraceID().String()+"-") {
				t.Fatalf("sampled %v: traceparent %q; want trace %s", sampled, h, sc.TraceID())
			}
		}
		if n := len(sr.Ended()); n != 1 {
			t.Fatalf("%d client spans recorded; want the sampled call's one", n)
		}
	})
	t.Run("root span", func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		base := &seenBy{}
		get(t, upstream.NewClient(base, "openai", prop, tp), context.Background())
		if len(sr.Ended()) != 1 || base.reqs[0].Header.Get("traceparent") == "" {
			t.Fatalf("%d spans, traceparent %q: a recording provider's root span was skipped", len(sr.Ended()), base.reqs[0].Header.Get("traceparent"))
		}
	})
	// The calls that went through otelhttp, too, recorded no metrics.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			t.Errorf("the client recorded %s", m.Name)
		}
	}
}
