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
// template, and a caller's Host header adds no series: server.address and
// server.port are the listen address's (WithServerAddress). The front door
// once had no HTTP metrics at all unless tracing was on, and then one
// series per Host header; then a server.address of "openai", which is no
// address.
func TestMetricsWithoutTracing(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	e := newEnv(t, newFake(), withHandler(openaiapi.WithMeterProvider(mp), openaiapi.WithServerAddress("127.0.0.1:8089")))

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

	routes := callsByRoute(t, reader, "127.0.0.1", 8089)
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
	got := callsByRoute(t, reader, "", 0) // no listen address set: none, whatever the Host header
	want := map[string]uint64{"/v1/batches/{id}": 3, "/v1/batches/{id}/cancel": 1, "unknown": 1, "/v1/batches": 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls by http.route %v, want %v", got, want)
	}
}

// callsByRoute collects reader and counts http.server.request.duration's
// calls by http.route, checking every point's server address and port
// (0: none).
func callsByRoute(t *testing.T, reader sdkmetric.Reader, addr string, port int) map[string]uint64 {
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
				if got, _ := dp.Attributes.Value("server.address"); got.AsString() != addr {
					t.Errorf("server.address %q, want %q (never the Host header)", got.AsString(), addr)
				}
				got, ok := dp.Attributes.Value(attribute.Key("server.port"))
				if port == 0 && ok {
					t.Errorf("server.port set (%v): it would come from the Host header", dp.Attributes.Encoded(attribute.DefaultEncoder()))
				}
				if port != 0 && got.AsInt64() != int64(port) {
					t.Errorf("server.port %v, want %d", got.String(), port)
				}
			}
		}
	}
	if !found {
		t.Fatal("no http.server.request.duration recorded without a tracer provider")
	}
	return routes
}

// TestServerAddressMustBeHostPort: an address that is not host:port fails
// New, naming it, rather than becoming a server.address that names no
// address.
func TestServerAddressMustBeHostPort(t *testing.T) {
	// A port that is not a number from 0 to 65535 would make otelhttp
	// take server.port from the caller's Host header after all.
	for _, addr := range []string{"openai", "127.0.0.1", "[::1", "127.0.0.1:http", "127.0.0.1:65536", "127.0.0.1:-1"} {
		if _, err := openaiapi.New(nil, openaiapi.WithServerAddress(addr)); err == nil || !strings.Contains(err.Error(), "server address") {
			t.Errorf("WithServerAddress(%q): %v, want an error naming the server address", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "[::]:8080", ":8080"} {
		if _, err := openaiapi.New(nil, openaiapi.WithServerAddress(addr)); err != nil {
			t.Errorf("WithServerAddress(%q): %v", addr, err)
		}
	}
}
