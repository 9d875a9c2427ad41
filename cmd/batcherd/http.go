package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/openaiapi"
	"github.com/batcherhq/batcher/security"
)

// httpReadHeaderTimeout bounds reading a request's headers (slowloris);
// httpIdleTimeout how long a keep-alive connection may sit idle. Bodies and
// answers have no bound of their own: an upload may be large and a call
// lasts as long as its deadline in the core.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpIdleTimeout       = 2 * time.Minute
)

// httpFront is the OpenAI-compatible HTTP front door.
type httpFront struct {
	srv    *http.Server
	lis    net.Listener
	served chan error
	// Files is the file store behind /v1/files, nil without a data_dir;
	// the batch API shares it.
	Files *openaiapi.FileStore
	// Handler serves the API.
	Handler *openaiapi.Handler
}

// startHTTP listens and serves the front door in front of core, or returns
// nil when http.listen is off. Without tokens it refuses any address that
// is not loopback, whatever the configuration's host resolved to.
//
// mount, when not nil, adds options once the file store is open (nil
// without a data_dir): the seam where the batch API mounts, with
// openaiapi.WithBatches and a handler that reads input files from and
// writes output files to that store.
func startHTTP(cfg *config.Config, core *batcher.Batcher, sec *security.Security, tp trace.TracerProvider, mp metric.MeterProvider,
	lookupEnv func(string) (string, bool), log *slog.Logger, mount func(files *openaiapi.FileStore) []openaiapi.Option) (*httpFront, error) {
	front, err := cfg.BuildHTTP(lookupEnv, tp)
	if err != nil || front == nil {
		return nil, err
	}
	f := &httpFront{served: make(chan error, 1)}
	opts := append(front.Options, openaiapi.WithLogger(log), openaiapi.WithAccessFunc(security.AccessFrom),
		openaiapi.WithMeterProvider(mp)) // http.server.* on /metrics, with tracing or without
	if front.FilesDir != "" {
		if f.Files, err = openaiapi.OpenFileStore(front.FilesDir); err != nil {
			return nil, fmt.Errorf("data_dir: %w", err)
		}
		opts = append(opts, openaiapi.WithFileStore(f.Files))
	}
	if mount != nil {
		opts = append(opts, mount(f.Files)...)
	}
	if f.lis, err = net.Listen("tcp", front.Listen); err != nil {
		return nil, fmt.Errorf("http listen %s: %w", front.Listen, err)
	}
	if !front.Authenticated && !sec.AuthOn() && !cfg.Security.Insecure {
		// A host name that validation took for loopback and that resolved
		// otherwise: the rule of every listener, on the bound address.
		if tcp, ok := f.lis.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
			_ = f.lis.Close()
			return nil, fmt.Errorf("http.listen %s: bound to %s, which is not loopback: without authentication the front door serves loopback only, unless --insecure", front.Listen, f.lis.Addr())
		}
	}
	// The bound address (a port of 0 resolved) is the metrics'
	// server.address and server.port.
	opts = append(opts, openaiapi.WithServerAddress(f.lis.Addr().String()))
	if f.Handler, err = openaiapi.New(core, opts...); err != nil {
		_ = f.lis.Close()
		return nil, fmt.Errorf("http: %w", err)
	}
	f.lis = sec.Listener(f.lis)
	f.srv = &http.Server{
		// The same authentication as gRPC: 401 without a valid credential;
		// the handler answers 403 for a route or priority the tenant may
		// not use. Without a tenants file every caller is anonymous and the
		// front door's own tokens, if any, apply.
		Handler:           sec.HTTPMiddleware(f.Handler),
		ReadHeaderTimeout: httpReadHeaderTimeout,
		MaxHeaderBytes:    sec.MaxHeaderBytes(), // before authentication: bounded like gRPC's
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("http listening", "addr", f.lis.Addr().String(), "api", "openai", "auth", front.Authenticated || sec.AuthOn(),
		"tls", sec.TLSOn(), "files_dir", front.FilesDir)
	go func() { f.served <- serveHTTP(sec, f.srv, f.lis) }()
	return f, nil
}

// errs reports a listener failure; nil (never ready) when f is nil.
func (f *httpFront) errs() <-chan error {
	if f == nil {
		return nil
	}
	return f.served
}

// shutdown closes the listener and waits for the calls in flight, within
// ctx; after it, it closes the remaining connections. It runs once the
// core has drained: until then the listener stays open and every new call
// is answered 503, so that clients see the shutdown rather than a refused
// connection.
func (f *httpFront) shutdown(ctx context.Context, log *slog.Logger) {
	if f == nil {
		return
	}
	if err := f.srv.Shutdown(ctx); err != nil {
		log.Warn("http drain incomplete: closing the remaining connections", "err", err)
		_ = f.srv.Close()
	}
	if err := <-f.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("http serve", "err", err)
	}
}
