package telemetry

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	metricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/batcherhq/batcher/batcher"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env returns a LookupEnv over vars, and sets them in the process
// environment too, where the exporters read their settings.
func env(t *testing.T, vars map[string]string) func(string) (string, bool) {
	for _, k := range []string{EnvTracesExporter, EnvMetricsExporter, EnvEndpoint, EnvTracesEndpoint, EnvMetricsEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"} {
		t.Setenv(k, vars[k])
	}
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestSetupExportsOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name            string
		vars            map[string]string
		traces, metrics string
	}{
		{"nothing set", nil, "", ""},
		{"endpoint", map[string]string{EnvEndpoint: "http://127.0.0.1:1"}, "otlp", "otlp"},
		{"traces endpoint only", map[string]string{EnvTracesEndpoint: "http://127.0.0.1:1"}, "otlp", ""},
		{"traces none", map[string]string{EnvEndpoint: "http://127.0.0.1:1", EnvTracesExporter: "none"}, "", "otlp"},
		{"metrics prometheus", map[string]string{EnvMetricsExporter: "prometheus"}, "", ""},
		{"metrics none", map[string]string{EnvEndpoint: "http://127.0.0.1:1", EnvMetricsExporter: "none"}, "otlp", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := Setup(t.Context(), Config{LookupEnv: env(t, tc.vars)})
			if err != nil {
				t.Fatal(err)
			}
			if tel.OTLPTraces != tc.traces || tel.OTLPMetrics != tc.metrics {
				t.Errorf("traces %q metrics %q, want %q %q", tel.OTLPTraces, tel.OTLPMetrics, tc.traces, tc.metrics)
			}
			if (tel.TracerProvider != nil) != (tc.traces != "") {
				t.Errorf("tracer provider %v, want one: %v", tel.TracerProvider, tc.traces != "")
			}
			if tel.Metrics == nil {
				t.Error("no Prometheus handler")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = tel.Shutdown(ctx) // exports to nowhere may fail; it must not hang
		})
	}
}

func TestSetupRejectsABadProtocol(t *testing.T) {
	_, err := Setup(t.Context(), Config{LookupEnv: env(t, map[string]string{EnvEndpoint: "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"})})
	if err == nil || !strings.Contains(err.Error(), "exporter") {
		t.Fatalf("err %v, want a failure naming the exporter", err)
	}
}

type traceSink struct {
	tracepb.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (s *traceSink) Export(_ context.Context, r *tracepb.ExportTraceServiceRequest) (*tracepb.ExportTraceServiceResponse, error) {
	for _, rs := range r.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &tracepb.ExportTraceServiceResponse{}, nil
}

type metricSink struct {
	metricpb.UnimplementedMetricsServiceServer
	exports atomic.Int64
	mu      sync.Mutex
	counts  map[string]uint64 // histogram name: the count of its last data points
}

func (s *metricSink) Export(_ context.Context, r *metricpb.ExportMetricsServiceRequest) (*metricpb.ExportMetricsServiceResponse, error) {
	s.exports.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]uint64{}
	}
	for _, rm := range r.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				var n uint64
				for _, dp := range m.GetHistogram().GetDataPoints() {
					n += dp.GetCount()
				}
				s.counts[m.GetName()] = n
			}
		}
	}
	return &metricpb.ExportMetricsServiceResponse{}, nil
}

// TestSetupHandsTheCoreHistogramsToEveryReader runs one request through a
// core built with CoreOptions and finds its histograms, which the core
// counts for its MetricsProducer, in both readers: the Prometheus
// registry and an OTLP export.
func TestSetupHandsTheCoreHistogramsToEveryReader(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	ms := &metricSink{}
	metricpb.RegisterMetricsServiceServer(gs, ms)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	tel, err := Setup(t.Context(), Config{LookupEnv: env(t, map[string]string{EnvEndpoint: "http://" + lis.Addr().String(), EnvTracesExporter: "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})})
	if err != nil {
		t.Fatal(err)
	}
	be := batcher.BackendFunc(func(_ context.Context, _ *batcher.Batch, out []batcher.Response) error {
		for i := range out {
			out[i].Text = "ok"
			out[i].Usage = batcher.Usage{PromptTokens: 3, CompletionTokens: 1}
		}
		return nil
	})
	core, err := batcher.New(append(tel.CoreOptions(),
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "be"}))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Do(t.Context(), &batcher.Request{Route: "m", Priority: batcher.PriorityNormal, Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "hi"}}); err != nil {
		t.Fatal(err)
	}
	if err := core.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	families, err := tel.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	prom := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			prom[f.GetName()] += m.GetHistogram().GetSampleCount()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown (flushing to the receiver): %v", err)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, h := range []struct {
		name, promName string
		want           uint64
	}{
		{"batcher.request.duration", "batcher_request_duration_seconds", 1},
		{"batcher.request.queue_wait", "batcher_request_queue_wait_seconds", 1},
		{"batcher.batch.size", "batcher_batch_size", 1},
		{"batcher.batch.wait", "batcher_batch_wait_seconds", 1},
		{"batcher.batch.fill_ratio", "batcher_batch_fill_ratio", 1},
		{"gen_ai.client.operation.duration", "gen_ai_client_operation_duration_seconds", 1},
		{"gen_ai.client.token.usage", "gen_ai_client_token_usage", 2}, // input and output
	} {
		if prom[h.promName] != h.want || ms.counts[h.name] != h.want {
			t.Errorf("%s: count %d in Prometheus (%s), %d over OTLP, want %d and %d", h.name, prom[h.promName], h.promName, ms.counts[h.name], h.want, h.want)
		}
	}
}

// TestSetupHonoursTheProtocol exports a span and the metrics to a real
// OTLP receiver over each protocol.
func TestSetupHonoursTheProtocol(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		ts, ms := &traceSink{}, &metricSink{}
		tracepb.RegisterTraceServiceServer(gs, ts)
		metricpb.RegisterMetricsServiceServer(gs, ms)
		go func() { _ = gs.Serve(lis) }()
		defer gs.Stop()
		exportOnce(t, map[string]string{EnvEndpoint: "http://" + lis.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
		if ts.spans.Load() != 1 || ms.exports.Load() == 0 {
			t.Fatalf("received %d spans and %d metric exports over grpc, want 1 and some", ts.spans.Load(), ms.exports.Load())
		}
	})
	t.Run("http/protobuf", func(t *testing.T) {
		var traces, metrics atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/traces":
				traces.Add(1)
			case "/v1/metrics":
				metrics.Add(1)
			}
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer srv.Close()
		exportOnce(t, map[string]string{EnvEndpoint: srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
		if traces.Load() == 0 || metrics.Load() == 0 {
			t.Fatalf("received %d trace and %d metric posts over http, want some of each", traces.Load(), metrics.Load())
		}
	})
}

func exportOnce(t *testing.T, vars map[string]string) {
	t.Helper()
	tel, err := Setup(t.Context(), Config{LookupEnv: env(t, vars)})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("test").Start(t.Context(), "op")
	span.End()
	c, err := tel.MeterProvider.Meter("test").Int64Counter("test.count")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(t.Context(), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown (flushing to the receiver): %v", err)
	}
}
