package telemetry

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	metricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
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
}

func (s *metricSink) Export(context.Context, *metricpb.ExportMetricsServiceRequest) (*metricpb.ExportMetricsServiceResponse, error) {
	s.exports.Add(1)
	return &metricpb.ExportMetricsServiceResponse{}, nil
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
