package openaiapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/batcherhq/batcher/openaiapi"
)

// TestMetricsWithoutTracing: with a meter provider and no tracer provider
// (batcherd without OTLP traces) every call is measured, by endpoint
// template, and a caller's Host header adds no series: server.address is
// fixed and server.port left out. The front door once had no HTTP metrics
// at all unless tracing was on, and then one series per Host header.
func TestMetricsWithoutTracing(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e := newEnv(t, newFake(), withHandler(openaiapi.WithMeterProvider(mp)))

	call := func(method, path, body, host string) {
		t.Helper()
		req, err := http.NewRequestWithContext(testCtx(t), method, e.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+testToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: status %d", method, path, resp.StatusCode)
		}
	}
	call(http.MethodPost, "/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`, "a.example:1111")
	call(http.MethodGet, "/models", "", "b.example:2222")
	call(http.MethodGet, "/models", "", "c.example")

	routes := callsByRoute(t, reader)
	if routes["/v1/chat/completions"] != 1 || routes["/v1/models"] != 2 || len(routes) != 2 {
		t.Errorf("calls by http.route %v, want /v1/chat/completions 1 and /v1/models 2", routes)
	}
}

// TestMetricsBatchesByTemplate: the Batch API's retrieve and cancel are two
// http.route templates, as the files' paths are, and a path under
// /v1/batches/ that is neither is "unknown", each read as the Batch API
// routes it. They were one "/v1/batches/..." series, which told a poll
// from a cancel by method alone.
func TestMetricsBatchesByTemplate(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	e := newEnv(t, newFake(), withHandler(openaiapi.WithMeterProvider(mp), openaiapi.WithBatches(ok)))
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/batches/batch_1"},
		{http.MethodGet, "/batches/batch_2"},
		{http.MethodPost, "/batches/batch_1/cancel"},
		{http.MethodGet, "/batches/batch_1/results/x"},
		{http.MethodGet, "/batches"},
		// Slashes at the rest's ends, which the Batch API serves as
		// without them, are counted where they are served.
		{http.MethodGet, "/batches/batch_1/"},
		{http.MethodGet, "/batches/"},
	} {
		req, err := http.NewRequestWithContext(testCtx(t), c.method, e.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	got := callsByRoute(t, reader)
	want := map[string]uint64{"/v1/batches/{id}": 3, "/v1/batches/{id}/cancel": 1, "unknown": 1, "/v1/batches": 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls by http.route %v, want %v", got, want)
	}
}

// callsByRoute collects reader and counts http.server.request.duration's
// calls by http.route, checking every point's server address and port.
func callsByRoute(t *testing.T, reader sdkmetric.Reader) map[string]uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(testCtx(t), &rm); err != nil {
		t.Fatal(err)
	}
	routes := map[string]uint64{}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.server.request.duration" {
				continue
			}
			found = true
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("http.server.request.duration is %T", m.Data)
			}
			for _, dp := range h.DataPoints {
				route, _ := dp.Attributes.Value("http.route")
				routes[route.AsString()] += dp.Count
				if addr, _ := dp.Attributes.Value("server.address"); addr.AsString() != "openai" {
					t.Errorf("server.address %q, want openai (never the Host header)", addr.AsString())
				}
				if dp.Attributes.HasValue(attribute.Key("server.port")) {
					t.Errorf("server.port set (%v): it would come from the Host header", dp.Attributes.Encoded(attribute.DefaultEncoder()))
				}
			}
		}
	}
	if !found {
		t.Fatal("no http.server.request.duration recorded without a tracer provider")
	}
	return routes
}
