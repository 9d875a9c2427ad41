package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/security"
)

// daemonSecurity is the process's security.Security, reloaded on SIGHUP
// besides its own watch of the files.
type daemonSecurity struct {
	*security.Security
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// onHUP, when set, runs on SIGHUP after the security files reload:
	// the configuration's reload (reload.go).
	onHUP atomic.Pointer[func()]
}

// OnSIGHUP sets f to run on every SIGHUP, in the signal's goroutine, after
// the TLS, tenants and JWKS files have reloaded.
func (d *daemonSecurity) OnSIGHUP(f func()) { d.onHUP.Store(&f) }

// startSecurity loads the TLS, tenants and JWKS files the configuration
// names, starts watching them, and reloads them all on SIGHUP. Every
// listener of the process takes its options from the one it returns
// (GRPCServerOptions, Listener; TLSConfig and HTTPMiddleware for HTTP).
func startSecurity(cfg *config.Config, log *slog.Logger) (*daemonSecurity, error) {
	opts := cfg.Security.Options()
	opts.Logger = log
	sec, err := security.New(opts)
	if err != nil {
		return nil, err
	}
	sec.Start()
	d := &daemonSecurity{Security: sec, stop: make(chan struct{}), done: make(chan struct{})}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(d.done)
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				log.Info("SIGHUP: reloading the TLS, tenants and JWKS files, and the configuration")
				_ = sec.Reload() // logs what it refused
				if f := d.onHUP.Load(); f != nil {
					(*f)()
				}
			case <-d.stop:
				return
			}
		}
	}()
	logSecurity(log, cfg, sec)
	return d, nil
}

// grpcOptions are the gRPC server's security options: TLS, limits,
// authentication, then the admin right on the
// AdminService (WatchStats), which an anonymous caller (no tenants file)
// has from loopback only (Tenant.AdminFrom).
func (d *daemonSecurity) grpcOptions() []grpc.ServerOption {
	unary, stream := security.AdminServiceOnly(batcherv1.AdminService_ServiceDesc.ServiceName)
	return append(d.GRPCServerOptions(), grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
}

// adminHandler guards the admin listener's handler h. With authentication
// on, every path but /healthz (for probes) needs a credential (401
// without) of a tenant with the admin right (403 without), /metrics
// included: its series carry every tenant's figures, and Prometheus
// scrapes with a bearer token (authorization.credentials_file) or a
// client certificate mapped to an admin tenant. Without authentication,
// the anonymous tenant's admin right holds on loopback only.
func adminHandler(sec *security.Security, h http.Handler) http.Handler {
	if !sec.AuthOn() {
		// The anonymous tenant's admin right holds on loopback only: an
		// admin listener that --insecure put on the network serves probes
		// and /metrics (the anonymous tenant's figures alone) to anyone,
		// and the status page, its API and pprof to loopback callers.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" || r.URL.Path == "/metrics" || security.LoopbackAddr(r.RemoteAddr) {
				h.ServeHTTP(w, r)
				return
			}
			http.Error(w, "the admin right is needed: without a tenants file only loopback callers have it", http.StatusForbidden)
		})
	}
	guarded := sec.HTTPMiddleware(security.RequireAdmin(h))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// serveHTTP serves srv on lis with the process's TLS, when on.
func serveHTTP(sec *security.Security, srv *http.Server, lis net.Listener) error {
	if tc := sec.TLSConfig("h2", "http/1.1"); tc != nil {
		srv.TLSConfig = tc
		return srv.ServeTLS(lis, "", "") // the certificate comes from tc
	}
	return srv.Serve(lis)
}

// jobsScope scopes ctx's calls of the jobs manager (gRPC JobService and
// the HTTP batch API) to the caller's tenant, from the authentication
// middleware, with its jobs and items_per_job quotas and its Access, which
// the jobs creator admits every route and the priority of a new job with. Without a tenants
// file the caller is the anonymous tenant and the calls are unscoped:
// they see every job, as batcherd did before tenants.
func jobsScope(ctx context.Context) context.Context {
	t := security.TenantFrom(ctx)
	if t == nil || t.Name == security.AnonymousName {
		return ctx
	}
	return jobs.WithTenant(ctx, jobs.Tenant{Name: t.Name, MaxJobs: t.Quotas.Jobs, MaxItems: int64(t.Quotas.ItemsPerJob), Access: t.Access()})
}

// Close stops the SIGHUP handler and the watcher. Idempotent.
func (d *daemonSecurity) Close() {
	d.once.Do(func() {
		close(d.stop)
		<-d.done
		d.Security.Close()
	})
}

// logSecurity logs what protects the listener: file names and counts,
// never a token, a hash or a key.
func logSecurity(log *slog.Logger, cfg *config.Config, sec *security.Security) {
	s := cfg.Security
	attrs := []any{"tls", sec.TLSOn(), "auth", sec.AuthOn(), "insecure", s.Insecure}
	if sec.TLSOn() {
		attrs = append(attrs, "tls_cert", s.TLS.CertFile, "mtls", s.TLS.ClientCAFile != "")
		if s.TLS.ClientCAFile != "" {
			attrs = append(attrs, "client_auth", s.TLS.ClientAuth)
		}
	}
	if ts := sec.Authenticator().Tenants(); ts != nil {
		attrs = append(attrs, "tenants_file", s.TenantsFile, "tenants", ts.Names())
	}
	if j := s.JWT; j != nil {
		src := j.JWKSFile
		if u, err := url.Parse(j.JWKSURL); err == nil && j.JWKSURL != "" {
			src = u.Scheme + "://" + u.Host + u.Path // no query: it might hold a key
		}
		attrs = append(attrs, "jwks", src, "jwt_issuer", j.Issuer, "jwt_audience", j.Audience)
	}
	l := s.Limits
	attrs = append(attrs, slog.Group("limits", "max_connections", l.MaxConnections, "max_concurrent_streams", l.MaxConcurrentStreams,
		"max_recv_msg_bytes", l.MaxRecvMsgBytes, "max_send_msg_bytes", l.MaxSendMsgBytes,
		"keepalive_min_time", l.Keepalive.MinTime.String()))
	log.Info("security", attrs...)
}
