package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/batcherhq/batcher/batcher"
)

// The standard variables Setup reads (through Config.LookupEnv) to decide
// whether to export over OTLP. The exporters themselves read the rest of
// their settings (endpoint, protocol, headers) from the process
// environment, as the OpenTelemetry specification has it.
const (
	EnvTracesExporter  = "OTEL_TRACES_EXPORTER"
	EnvMetricsExporter = "OTEL_METRICS_EXPORTER"
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
)

// Config configures Setup.
type Config struct {
	// ServiceName is the resource's service.name. Default "batcherd".
	ServiceName string
	// LookupEnv reads the OTEL_* variables that decide what to export.
	// Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// NoPrometheus leaves the Prometheus registry out (no admin listener).
	NoPrometheus bool
}

// Telemetry holds the providers Setup built. Shut it down once, after
// everything that records has stopped.
type Telemetry struct {
	// MeterProvider is always set.
	MeterProvider *sdkmetric.MeterProvider
	// CoreMetrics is registered on every reader of MeterProvider: the
	// core counts its histograms for it (CoreOptions).
	CoreMetrics *batcher.MetricsProducer
	// TracerProvider is nil unless traces are exported: then nothing makes
	// spans at all.
	TracerProvider *sdktrace.TracerProvider
	// Metrics serves the Prometheus exposition; nil with NoPrometheus.
	Metrics http.Handler
	// Gatherer is the Prometheus registry the metrics aggregate into, for
	// the live views (Sources.Metrics). Always set: without the
	// exposition it is the one reader that stays.
	Gatherer prometheus.Gatherer
	// OTLPMetrics and OTLPTraces say whether OTLP exporters were set up, and
	// which (the OTEL_*_EXPORTER value, or "otlp").
	OTLPMetrics, OTLPTraces string
}

// Setup builds the providers.
//
// Metrics: a Prometheus registry always, served (unless NoPrometheus) with
// the Go runtime and process collectors; an OTLP (or console) exporter when
// OTEL_METRICS_EXPORTER names one, or when it is unset and an OTLP endpoint
// variable is set. "none" and "prometheus" add nothing: /metrics serves
// Prometheus already.
//
// Traces: when OTEL_TRACES_EXPORTER names an exporter other than "none", or
// when it is unset and an OTLP endpoint variable is set. The protocol
// (OTEL_EXPORTER_OTLP_PROTOCOL or its per-signal variant: grpc or
// http/protobuf, default http/protobuf) is honoured for both.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "batcherd"
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName)))
	if err == nil {
		res, err = resource.Merge(res, resource.Environment())
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	// One reader for the exposition and the live views alike: each reader
	// aggregates every measurement again. Exemplars are off: the text
	// exposition shows none, and offering them costs every measurement
	// (traces do not need them: a span links to no metric). Every reader
	// takes the core's producer.
	core := batcher.NewMetricsProducer()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithProducer(core))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t := &Telemetry{Gatherer: reg, CoreMetrics: core}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(exp), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter)}
	if !cfg.NoPrometheus {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	if kind, ok := wanted(cfg.LookupEnv, EnvMetricsExporter, EnvMetricsEndpoint); ok && kind != "prometheus" {
		r, err := metricReader(ctx, kind, cfg.LookupEnv, core)
		if err != nil {
			return nil, fmt.Errorf("metrics exporter (%s): %w", kind, err)
		}
		opts = append(opts, sdkmetric.WithReader(r))
		t.OTLPMetrics = kind
	}
	t.MeterProvider = sdkmetric.NewMeterProvider(opts...)

	if kind, ok := wanted(cfg.LookupEnv, EnvTracesExporter, EnvTracesEndpoint); ok {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			_ = t.MeterProvider.Shutdown(ctx)
			return nil, fmt.Errorf("traces exporter (%s): %w", kind, err)
		}
		t.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.OTLPTraces = kind
	}
	return t, nil
}

// CoreOptions are the options that make a core record its metrics into
// t: the MeterProvider and the producer of its histograms.
func (t *Telemetry) CoreOptions() []batcher.Option {
	return []batcher.Option{batcher.WithMeterProvider(t.MeterProvider), batcher.WithMetricsProducer(t.CoreMetrics)}
}

// metricReader returns a periodic reader exporting to kind ("otlp" over
// OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
// default http/protobuf; "console": standard output) that also collects
// producer. The exporters read the rest of their settings from the
// environment. It does what autoexport.NewMetricReader does for these
// kinds, which takes no producer but those named in the environment.
func metricReader(ctx context.Context, kind string, lookupEnv func(string) (string, bool), producer sdkmetric.Producer) (sdkmetric.Reader, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	switch kind {
	case "otlp":
		proto, _ := lookupEnv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
		if proto == "" {
			proto, _ = lookupEnv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch proto {
		case "grpc":
			exp, err = otlpmetricgrpc.New(ctx)
		case "http/protobuf", "":
			exp, err = otlpmetrichttp.New(ctx)
		default:
			err = fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: must be grpc or http/protobuf", proto)
		}
	case "console":
		exp, err = stdoutmetric.New()
	default:
		err = fmt.Errorf("%s %q: must be otlp, console, prometheus or none", EnvMetricsExporter, kind)
	}
	if err != nil {
		return nil, err
	}
	return sdkmetric.NewPeriodicReader(exp, sdkmetric.WithProducer(producer)), nil
}

// wanted reports whether a signal is to be exported and by what: the
// exporter variable's value, or "otlp" when it is unset and an OTLP
// endpoint variable (generic or the signal's own) is set.
func wanted(lookupEnv func(string) (string, bool), exporterKey, endpointKey string) (string, bool) {
	if v, ok := lookupEnv(exporterKey); ok && v != "" {
		return v, v != "none"
	}
	for _, k := range []string{EnvEndpoint, endpointKey} {
		if v, ok := lookupEnv(k); ok && v != "" {
			return "otlp", true
		}
	}
	return "", false
}

// Shutdown flushes and stops the providers, metrics last.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.TracerProvider != nil {
		errs = append(errs, t.TracerProvider.Shutdown(ctx))
	}
	errs = append(errs, t.MeterProvider.Shutdown(ctx))
	return errors.Join(errs...)
}
