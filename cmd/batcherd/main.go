package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/server"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

// traceFlushTimeout bounds flushing spans at exit.
const traceFlushTimeout = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, stop, os.Args[1:], os.LookupEnv, os.Stderr))
}

// run is batcherd. It serves until ctx ends (a signal), then shuts down;
// unsignal restores the default signal handling, so that a second signal
// kills the process.
func run(ctx context.Context, unsignal func(), args []string, lookupEnv func(string) (string, bool), stderr io.Writer) int {
	cfg, err := config.Load(args, lookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "batcherd: bad configuration:\n%v\n", err)
		return exitConfig
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)

	tp, err := newTracerProvider(ctx, lookupEnv)
	if err != nil {
		log.Error("tracing", "err", err)
		return exitConfig
	}
	var tracing trace.TracerProvider // nil: no spans at all
	buildOpts := []config.BuildOption{config.WithLookupEnv(lookupEnv)}
	if tp != nil {
		tracing = tp
		defer flushTraces(tp, log)
		buildOpts = append(buildOpts, config.WithTracerProvider(tp))
	}
	built, err := cfg.Build(buildOpts...)
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig
	}
	// Backends close after the core's drain: deferred, this runs after
	// shutdown below, and before the traces are flushed.
	defer func() {
		if err := built.Close(); err != nil {
			log.Error("closing backends", "err", err)
		}
	}()
	core, err := batcher.New(built.Core...)
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig
	}
	srv := server.New(core, append(built.Server, server.WithLogger(log))...)
	gs := server.NewGRPCServer(tracing)
	srv.Register(gs)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", "addr", cfg.Listen, "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed
	}
	log.Info("listening", "addr", lis.Addr().String(), "tracing", tp != nil)
	logLayout(log, cfg, built)

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()

	code := exitOK
	select {
	case <-ctx.Done():
		unsignal()
		log.Info("shutting down", "cause", "signal", "drain_timeout", cfg.DrainTimeout.String())
	case err := <-served:
		// Serve fails only when the listener does.
		log.Error("serve", "err", err)
		code = exitFailed
	}
	shutdown(log, srv, gs, cfg.DrainTimeout.D())
	return code
}

// shutdown stops the service in order within drain: health, admission and
// the core's drain and the streams (srv.Shutdown), then the gRPC server,
// gracefully while time is left and forcibly after.
func shutdown(log *slog.Logger, srv *server.Server, gs interface {
	GracefulStop()
	Stop()
}, drain time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Error("drain incomplete", "err", err)
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		log.Warn("drain timeout passed: closing the remaining connections", "drain_timeout", drain.String())
		gs.Stop()
		<-stopped
	}
	log.Info("stopped", "took", time.Since(start).Round(time.Millisecond).String())
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	level, _ := cfg.Log.SlogLevel() // validated by Load
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// logLayout logs the routes and backends being served. Durations are
// logged as strings ("50ms"): slog's JSON handler would write nanoseconds.
func logLayout(log *slog.Logger, cfg *config.Config, built *config.Built) {
	for _, b := range cfg.Backends {
		conc := b.MaxConcurrency
		if conc == 0 {
			conc = batcher.DefaultMaxConcurrency
		}
		attrs := []any{"name", b.Name, "type", b.Type, "max_concurrency", conc, "rpm", b.RPM, "tpm", b.TPM}
		if o := b.OpenAI; o != nil && built.OpenAI[b.Name] != nil {
			// The base URL holds no credentials (validated); the key is
			// named, never shown.
			attrs = append(attrs, slog.Group("openai",
				"base_url", o.BaseURL, "api_key_env", o.APIKeyEnv, "pack", o.Pack.Enabled, "pack_routes", o.Pack.Routes))
		}
		if p := built.Sims[b.Name]; p != nil {
			sc := p.Config()
			attrs = append(attrs, slog.Group("sim",
				"base_latency", sc.BaseLatency.String(), "per_token", sc.PerToken.String(), "native", !sc.FanOut,
				"max_concurrency", sc.MaxConcurrency, "rpm", sc.RPM, "tpm", sc.TPM,
				"max_batch_size", sc.MaxBatchSize, "failure_rate", sc.FailureRate))
		}
		log.Info("backend", attrs...)
	}
	for _, r := range cfg.Routes {
		model := r.Model
		if model == "" {
			model = r.Name
		}
		attrs := []any{"name", r.Name, "operation", r.Operation, "backend", r.Backend, "model", model}
		if len(r.Fallbacks) > 0 {
			fb := make([]string, len(r.Fallbacks))
			for i, f := range r.Fallbacks {
				fb[i] = f.Backend
			}
			attrs = append(attrs, "fallbacks", fb)
		}
		log.Info("route", attrs...)
	}
}

// newTracerProvider returns an SDK tracer provider exporting over OTLP/gRPC
// when the standard OTEL_EXPORTER_OTLP_* endpoint variables ask for it, and
// nil otherwise. The exporter reads the rest of its settings from the
// environment.
func newTracerProvider(ctx context.Context, lookupEnv func(string) (string, bool)) (*sdktrace.TracerProvider, error) {
	endpoint := false
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v, ok := lookupEnv(k); ok && v != "" {
			endpoint = true
		}
	}
	if !endpoint {
		return nil, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "batcherd")))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	if res, err = resource.Merge(res, resource.Environment()); err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp, nil
}

func flushTraces(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Error("flushing traces", "err", err)
	}
}
