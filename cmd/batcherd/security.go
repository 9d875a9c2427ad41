package main

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/security"
)

// daemonSecurity is the process's security.Security, reloaded on SIGHUP
// besides its own watch of the files.
type daemonSecurity struct {
	*security.Security
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

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
				log.Info("SIGHUP: reloading the TLS, tenants and JWKS files")
				_ = sec.Reload() // logs what it refused
			case <-d.stop:
				return
			}
		}
	}()
	logSecurity(log, cfg, sec)
	return d, nil
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

// tenantName names the tenant the authentication middleware put in ctx, or
// "" when none did.
func tenantName(ctx context.Context) string {
	if t := security.TenantFrom(ctx); t != nil {
		return t.Name
	}
	return ""
}
