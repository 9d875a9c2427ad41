package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/security"
	"github.com/batcherhq/batcher/server"
	"github.com/batcherhq/batcher/telemetry"
	"github.com/batcherhq/batcher/telemetry/admin"
)

// telemetryFlushTimeout bounds flushing metrics and spans at exit, and the
// admin listener's shutdown.
const telemetryFlushTimeout = 5 * time.Second

// observability is batcherd's telemetry: the providers, the live sampler,
// the admin listener and the access log.
type observability struct {
	cfg     config.Telemetry
	log     *slog.Logger
	tel     *telemetry.Telemetry
	sampler *telemetry.Sampler
	admin   *admin.Server
	http    *http.Server
	served  chan error
	closing chan struct{} // closed when the service begins to stop: WatchStats ends
	jobs    func() []telemetry.Job
	fleet   func() *telemetry.Fleet       // nil: alone
	cache   func() []telemetry.CacheRoute // nil: no response cache
}

// setJobs makes m's jobs part of the telemetry (gauges, status page,
// WatchStats). A nil m (jobs off) leaves the jobs list empty. Call it
// before startAdmin.
func (o *observability) setJobs(m *jobs.Manager) {
	if m != nil {
		o.jobs = jobsSource(m, o.log)
	}
}

// startTelemetry sets up the providers from cfg and the OTEL_* variables,
// and makes them global, so that otelgrpc, otelhttp and any library that
// asks the global providers report to them.
func startTelemetry(ctx context.Context, cfg *config.Config, lookupEnv func(string) (string, bool), log *slog.Logger) (*observability, error) {
	tel, err := telemetry.Setup(ctx, telemetry.Config{LookupEnv: lookupEnv, NoPrometheus: cfg.Telemetry.AdminOff()})
	if err != nil {
		return nil, err
	}
	otel.SetMeterProvider(tel.MeterProvider)
	if tel.TracerProvider != nil {
		otel.SetTracerProvider(tel.TracerProvider)
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	}
	return &observability{cfg: cfg.Telemetry, log: log, tel: tel, closing: make(chan struct{})}, nil
}

// coreOptions are the core's telemetry options.
func (o *observability) coreOptions() []batcher.Option { return o.tel.CoreOptions() }

// grpcOptions are the gRPC server's access log interceptors, at the
// configured level (server-side failures at least at warn), or none.
func (o *observability) grpcOptions() []grpc.ServerOption {
	level, on, _ := o.cfg.AccessLevel() // validated by Load
	if !on {
		return nil
	}
	return server.AccessLog(o.log, level)
}

// startAdmin starts the live sampler, registers the AdminService on gs and
// opens the admin listener, when one is configured.
func (o *observability) startAdmin(core *batcher.Batcher, srv *server.Server, gs *grpc.Server, sec *security.Security) error {
	src := telemetry.Sources{
		Lanes:     core.Lanes,
		Backends:  core.Stats,
		Limits:    core.BackendLimits,
		Streams:   srv.StreamStats,
		Jobs:      o.jobs,
		JobStates: jobStateNames(),
		Metrics:   o.tel.Gatherer,
		Fleet:     o.fleet,
		Cache:     o.cache,
	}
	if _, err := telemetry.RegisterLive(o.tel.MeterProvider, src); err != nil {
		return fmt.Errorf("live metrics: %w", err)
	}
	o.sampler = telemetry.NewSampler(src, o.cfg.StatsInterval.D(), 0)
	server.NewAdmin(o.sampler, o.closing).Register(gs)
	o.sampler.Start()
	if o.cfg.AdminOff() {
		return nil
	}
	lis, err := net.Listen("tcp", o.cfg.AdminListen)
	if err != nil {
		o.sampler.Stop()
		return fmt.Errorf("admin listener %s: %w", o.cfg.AdminListen, err)
	}
	o.admin = admin.New(admin.Config{Sampler: o.sampler, Metrics: o.tel.Metrics, Pprof: o.cfg.Pprof})
	o.http = &http.Server{Handler: adminHandler(sec, o.admin), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: sec.MaxHeaderBytes(), ErrorLog: slog.NewLogLogger(o.log.Handler(), slog.LevelWarn)}
	o.http.RegisterOnShutdown(o.admin.Close)
	o.served = make(chan error, 1)
	lis = sec.Listener(lis)
	go func() { o.served <- serveHTTP(sec, o.http, lis) }()
	attrs := []any{"addr", lis.Addr().String(), "pprof", o.cfg.Pprof, "metrics_otlp", o.tel.OTLPMetrics, "traces_otlp", o.tel.OTLPTraces,
		"tls", sec.TLSOn(), "auth", sec.AuthOn()}
	o.log.Info("admin listening", attrs...)
	if !o.cfg.AdminLoopback() && (!sec.TLSOn() || !sec.AuthOn()) {
		o.log.Warn("the admin listener is not on loopback and lacks TLS or authentication (--insecure): metrics, the status page and pprof (when enabled) are open to the network", "addr", lis.Addr().String())
	}
	return nil
}

// beginStop ends the WatchStats streams: called when shutdown begins, so
// that the gRPC server's graceful stop does not wait on them.
func (o *observability) beginStop() {
	select {
	case <-o.closing:
	default:
		close(o.closing)
	}
}

// stop closes the admin listener (in-flight scrapes finish, new ones are
// refused), stops the sampler and flushes the providers. It runs after the
// gRPC server has stopped, so that the drain is visible to the end.
func (o *observability) stop() {
	o.beginStop()
	ctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer cancel()
	if o.http != nil {
		if err := o.http.Shutdown(ctx); err != nil {
			o.log.Error("admin listener shutdown", "err", err)
			_ = o.http.Close()
		}
		if err := <-o.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("admin listener", "err", err)
		}
	}
	if o.sampler != nil {
		o.sampler.Stop()
	}
	if err := o.tel.Shutdown(ctx); err != nil {
		o.log.Error("flushing telemetry", "err", err)
	}
}
