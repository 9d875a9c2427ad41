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
	"strings"
	"syscall"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cache"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/fleet"
	"github.com/batcherhq/batcher/internal/version"
	"github.com/batcherhq/batcher/jobs"
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
//
// It runs in phases: load the configuration, start telemetry, start the
// core (startCore), start the servers in front of it (startServers), serve
// until told to stop and shut down (serve). What a phase opens is closed on
// the way out through cl, last opened first closed, as defers would.
func run(ctx context.Context, unsignal func(), args []string, lookupEnv func(string) (string, bool), stderr io.Writer) int {
	cfg, envWarnings, code, ok := loadConfig(args, lookupEnv, stderr)
	if !ok {
		return code
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)
	for _, w := range envWarnings {
		log.Warn(w)
	}

	// late closes what the telemetry reads (the job store) after cl has
	// stopped the telemetry.
	var cl, late closers
	defer late.run()
	defer cl.run()
	obs, err := startTelemetry(ctx, cfg, lookupEnv, log)
	if err != nil {
		log.Error("telemetry", "err", err)
		return exitConfig
	}
	cl.add(obs.stop) // last: the admin listener, then metrics and spans flushed
	d := &runState{cfg: cfg, log: log, obs: obs, lookupEnv: lookupEnv, late: &late}
	if code, ok := d.startCore(&cl); !ok {
		return code
	}
	if code, ok := d.startServers(ctx, &cl); !ok {
		return code
	}
	return d.serve(ctx, unsignal, args, &cl)
}

// closers holds what run closes on its way out, in reverse order.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c *closers) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// loadConfig loads the configuration and checks the BATCHER_* variables
// (config.CheckEnviron: a typo fails, any other unknown one is returned as
// a warning to log), or returns the exit code: 0 for --help and --version
// (done), exitConfig for a bad configuration.
func loadConfig(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (*config.Config, []string, int, bool) {
	cfg, err := config.Load(args, lookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil, nil, exitOK, false
	}
	if errors.Is(err, config.ErrVersion) {
		_, _ = fmt.Fprintln(os.Stdout, version.String("batcherd"))
		return nil, nil, exitOK, false
	}
	var warnings []string
	if err == nil {
		warnings, err = cfg.CheckEnviron(environ(lookupEnv))
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "batcherd: bad configuration:\n%v\n", err)
		return nil, nil, exitConfig, false
	}
	return cfg, warnings, exitOK, true
}

// environ is the process's environment as lookupEnv sees it: os.Environ's
// variables that lookupEnv finds (a test's lookupEnv hides them).
func environ(lookupEnv func(string) (string, bool)) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := lookupEnv(name); ok {
			env = append(env, kv)
		}
	}
	return env
}

// runState is what run has started, phase by phase.
type runState struct {
	cfg       *config.Config
	log       *slog.Logger
	obs       *observability
	lookupEnv func(string) (string, bool)
	late      *closers // run after the telemetry has stopped

	// startCore's
	tracing   trace.TracerProvider // nil: no spans at all
	buildOpts []config.BuildOption
	sec       *daemonSecurity
	built     *config.Built
	fl        *fleet.Fleet // nil: alone
	rc        *cache.Cache // nil: off
	core      *batcher.Batcher

	// startServers'
	srv        *server.Server
	gs         *grpc.Server
	stopJobs   func(context.Context)
	jobManager *jobs.Manager
	lis        net.Listener
	front      *httpFront
}

// startCore starts security, the backends, the fleet, the cache and the
// core, or returns the exit code.
func (d *runState) startCore(cl *closers) (int, bool) {
	cfg, log, obs := d.cfg, d.log, d.obs
	d.buildOpts = []config.BuildOption{config.WithLookupEnv(d.lookupEnv)}
	if tp := obs.tel.TracerProvider; tp != nil {
		d.tracing = tp
		d.buildOpts = append(d.buildOpts, config.WithTracerProvider(tp))
	}
	sec, err := startSecurity(cfg, log) // security.go
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig, false
	}
	d.sec = sec
	cl.add(sec.Close)
	built, err := cfg.Build(d.buildOpts...)
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig, false
	}
	d.built = built
	// Backends close after the core's drain: this runs after shutdown in
	// serve, and before the traces are flushed.
	cl.add(func() {
		if err := built.Close(); err != nil {
			log.Error("closing backends", "err", err)
		}
	})
	coreOpts := append(built.Core, append(obs.coreOptions(), batcher.WithLogger(log))...)
	fl, err := openFleet(cfg.Fleet, obs.tel.MeterProvider, log) // fleet.go; nil: alone
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig, false
	}
	if fl != nil {
		// Added after the backends' close: it runs before it, once the
		// core has drained.
		d.fl = fl
		cl.add(func() { closeFleet(fl, log) })
		coreOpts = append(coreOpts, batcher.WithCoordinator(fl))
		obs.fleet = fleetSource(fl)
	}
	rc, closeRC, err := openCache(cfg, obs.tel.MeterProvider, log) // cache.go; nil: off
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig, false
	}
	// Added after the fleet's: it runs before it, once the core has
	// drained.
	cl.add(closeRC)
	d.rc = rc
	if rc != nil {
		coreOpts = append(coreOpts, batcher.WithCache(rc))
		obs.cache = cacheSource(rc)
	}
	core, err := batcher.New(coreOpts...)
	if err != nil {
		log.Error("bad configuration", "err", err)
		return exitConfig, false
	}
	d.core = core
	// The tenants' weights and quotas go to the core now and with every
	// tenants file a reload takes; one the core refuses is refused whole.
	if err := sec.OnTenants(func(ts *security.Tenants) error { return core.SetTenants(ts.Policies()) }); err != nil {
		log.Error("bad configuration", "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitConfig, false
	}
	return exitOK, true
}

// startServers starts the gRPC service, the jobs, the admin listener and
// the HTTP front door in front of the core, or returns the exit code.
func (d *runState) startServers(ctx context.Context, cl *closers) (int, bool) {
	cfg, log, obs, core, sec := d.cfg, d.log, d.obs, d.core, d.sec
	srv, err := server.New(core, append(d.built.Server, server.WithLogger(log), server.WithAccessFunc(security.AccessFrom))...)
	if err != nil { // the configuration checked these options when it loaded
		log.Error("bad configuration", "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitConfig, false
	}
	d.srv = srv
	// Without tracing, otelgrpc gets a no-op provider rather than the
	// global one: it still carries the caller's trace context to the
	// request (logs, upstream headers), without a span object per RPC.
	var grpcTracing trace.TracerProvider = noop.NewTracerProvider()
	if d.tracing != nil {
		grpcTracing = d.tracing
	}
	gs := server.NewGRPCServer(grpcTracing, append(sec.grpcOptions(), obs.grpcOptions()...)...)
	d.gs = gs
	// Its worker goroutines run from here on, so every way out stops it;
	// on the way out through shutdown in serve it has stopped already.
	cl.add(gs.Stop)
	srv.Register(gs)
	stopJobs, jobManager, err := startJobs(ctx, cfg, d.built, core, gs, obs.tel.MeterProvider, log, d.late)
	obs.setJobs(jobManager)
	d.stopJobs, d.jobManager = stopJobs, jobManager
	if err != nil {
		log.Error("jobs", "err", err)
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed, false
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", "addr", cfg.Listen, "err", err)
		stopJobs(context.Background())
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed, false
	}
	if err := obs.startAdmin(core, srv, gs, sec.Security); err != nil {
		log.Error("admin", "err", err)
		_ = lis.Close()
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed, false
	}
	front, err := startHTTP(cfg, core, sec.Security, d.tracing, obs.tel.MeterProvider, d.lookupEnv, log, batchesMount(jobManager))
	if err != nil {
		log.Error("http", "err", err)
		_ = lis.Close()
		_ = core.Shutdown(context.Background()) // nothing admitted yet
		return exitFailed, false
	}
	d.lis, d.front = sec.Listener(lis), front
	return exitOK, true
}

// serve takes reloads and serves until ctx ends or a listener fails, then
// shuts down; it returns the exit code.
func (d *runState) serve(ctx context.Context, unsignal func(), args []string, cl *closers) int {
	cfg, log, fl := d.cfg, d.log, d.fl
	reloader := newConfigReloader(args, d.lookupEnv, d.buildOpts, d.core, d.jobManager, d.rc, log, cfg, d.built)
	cl.add(func() {
		// After the core's drain, as the first backends' close.
		if err := reloader.closeBackends(); err != nil {
			log.Error("closing reloaded backends", "err", err)
		}
	})
	d.sec.OnSIGHUP(reloader.reload)
	reloader.watch(cfg.Security.ReloadInterval.D())
	cl.add(reloader.Close)
	if fl != nil {
		fl.SetInfo(map[string]string{"grpc": d.lis.Addr().String()})
		fl.Start(ctx)
		log.Info("joined the fleet", "replica", fl.ID(), "replicas", fl.Replicas(), "redis", !fl.Local())
	}
	log.Info("listening", "addr", d.lis.Addr().String(), "tracing", d.tracing != nil)
	logLayout(log, cfg, d.built)

	served := make(chan error, 1)
	go func() { served <- d.gs.Serve(d.lis) }()

	code := exitOK
	select {
	case <-ctx.Done():
		unsignal()
		log.Info("shutting down", "cause", "signal", "drain_timeout", cfg.DrainTimeout.String())
	case err := <-served:
		// Serve fails only when the listener does.
		log.Error("serve", "err", err)
		code = exitFailed
	case err := <-d.front.errs():
		log.Error("http serve", "err", err)
		code = exitFailed
	}
	d.obs.beginStop()
	shutdown(log, d.srv, d.gs, cfg.DrainTimeout.D(), d.stopJobs, d.front)
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
