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

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/internal/version"
	"github.com/batcherhq/batcher/security"
	"github.com/batcherhq/batcher/server"
	"github.com/batcherhq/batcher/telemetry"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

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
	if errors.Is(err, config.ErrVersion) {
		_, _ = fmt.Fprintln(os.Stdout, version.String("batcherd"))
		return exitOK
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "batcherd: bad configuration:\n%v\n", err)
		return exitConfig
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)

	obs, err := startTelemetry(ctx, cfg, lookupEnv, log)
	if err != nil {
		log.Error("telemetry", "err", err)
		return exitConfig
	}
	defer obs.stop() // last: the admin listener, then metrics and spans flushed
	tp := obs.tel.TracerProvider
	var tracing trace.TracerProvider // nil: no spans at all
	buildOpts := []config.BuildOption{config.WithLookupEnv(lookupEnv)}
	if tp != nil {
		tracing = tp
		buildOpts = append(buildOpts, config.WithTracerProvider(tp))
	}
	sec, err := startSecurity(cfg, log) // security.go
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig
	}
	defer sec.Close()
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
	coreOpts := append(built.Core, append(obs.coreOptions(), batcher.WithLogger(log))...)
	fl, err := openFleet(cfg.Fleet, obs.tel.MeterProvider, log) // fleet.go; nil: alone
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig
	}
	if fl != nil {
		// Deferred after the backends' close: it runs before it, once the
		// core has drained.
		defer closeFleet(fl, log)
		coreOpts = append(coreOpts, batcher.WithCoordinator(fl))
		obs.fleet = fleetSource(fl)
	}
	rc, closeRC, err := openCache(cfg, obs.tel.MeterProvider, log) // cache.go; nil: off
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig
	}
	// Deferred after the fleet's: it runs before it, once the core has
	// drained.
	defer closeRC()
	if rc != nil {
		coreOpts = append(coreOpts, batcher.WithCache(rc))
		obs.cache = cacheSource(rc)
	}
	core, err := batcher.New(coreOpts...)
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig
	}
	// The tenants' weights and quotas go to the core now and with every
	// tenants file a reload takes; one the core refuses is refused whole.
	if err := sec.OnTenants(func(ts *security.Tenants) error { return core.SetTenants(ts.Policies()) }); err != nil {
		log.Error("bad configuration", "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitConfig
	}
	srv, err := server.New(core, append(built.Server, server.WithLogger(log), server.WithAccessFunc(security.AccessFrom))...)
	if err != nil { // the configuration checked these options when it loaded
		log.Error("bad configuration", "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitConfig
	}
	// Without tracing, otelgrpc gets a no-op provider rather than the
	// global one: it still carries the caller's trace context to the
	// request (logs, upstream headers), without a span object per RPC.
	grpcTracing := tracing
	if grpcTracing == nil {
		grpcTracing = noop.NewTracerProvider()
	}
	gs := server.NewGRPCServer(grpcTracing, append(sec.grpcOptions(), obs.grpcOptions()...)...)
	// Its worker goroutines run from here on, so every way out stops it;
	// on the way out through shutdown below it has stopped already.
	defer gs.Stop()
	srv.Register(gs)
	stopJobs, jobManager, err := startJobs(ctx, cfg, built, core, gs, obs.tel.MeterProvider, log)
	obs.setJobs(jobManager)
	if err != nil {
		log.Error("jobs", "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", "addr", cfg.Listen, "err", err)
		stopJobs(context.Background())
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed
	}
	if err := obs.startAdmin(core, srv, gs, sec.Security); err != nil {
		log.Error("admin", "err", err)
		_ = lis.Close()
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed
	}
	front, err := startHTTP(cfg, core, sec.Security, tracing, lookupEnv, log, batchesMount(jobManager))
	if err != nil {
		log.Error("http", "err", err)
		_ = lis.Close()
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed
	}
	lis = sec.Listener(lis)
	reloader := newConfigReloader(args, lookupEnv, buildOpts, core, jobManager, rc, log, cfg, built)
	defer func() {
		// After the core's drain, as the first backends' close above.
		if err := reloader.closeBackends(); err != nil {
			log.Error("closing reloaded backends", "err", err)
		}
	}()
	sec.OnSIGHUP(reloader.reload)
	reloader.watch(cfg.Security.ReloadInterval.D())
	defer reloader.Close()
	if fl != nil {
		fl.SetInfo(map[string]string{"grpc": lis.Addr().String()})
		fl.Start(ctx)
		log.Info("joined the fleet", "replica", fl.ID(), "replicas", fl.Replicas(), "redis", !fl.Local())
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
	case err := <-front.errs():
		log.Error("http serve", "err", err)
		code = exitFailed
	}
	obs.beginStop()
	shutdown(log, srv, gs, cfg.DrainTimeout.D(), stopJobs, front)
	return code
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	level, _ := cfg.Log.SlogLevel() // validated by Load
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "text" {
		return slog.New(telemetry.NewLogHandler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, opts)))
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
		if a := b.Anthropic; a != nil && b.Type == config.TypeAnthropic {
			attrs = append(attrs, slog.Group("anthropic", "base_url", a.BaseURL, "api_key_env", a.APIKeyEnv, "version", a.Version))
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
