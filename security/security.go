package security

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/batcherhq/batcher/internal/filewatch"
)

// DefaultReloadInterval is how often the certificate, key, client CA,
// tenants and JWKS files are checked for changes.
const DefaultReloadInterval = 2 * time.Second

// Config is a listener's security. The zero Config is batcherd as it was:
// plaintext, every caller the anonymous tenant, and the default Limits.
type Config struct {
	// TLS, when set, serves TLS (and mTLS with a client CA).
	TLS *TLSFiles
	// TenantsFile, when set, turns authentication on: every call needs a
	// credential that maps to one of its tenants.
	TenantsFile string
	// JWT, when set, accepts JWTs as bearer tokens; it needs TenantsFile.
	JWT *JWTConfig
	// Limits bound connections, streams and messages.
	Limits Limits
	// ReloadInterval is how often the files are checked for changes.
	// Default DefaultReloadInterval; negative: only Reload (SIGHUP) reloads.
	ReloadInterval time.Duration
	// Logger logs reloads and refused credentials (at debug level).
	// Default slog.Default().
	Logger *slog.Logger
}

// Security is one process's transport security and authentication: the
// TLS state, the authenticator and the file watcher. Every listener of the
// process uses the same one, so that they serve the same certificate and
// the same tenants, reloaded together.
type Security struct {
	cfg  Config
	log  *slog.Logger
	tls  *TLS // nil: plaintext
	auth *Authenticator

	mu        sync.Mutex // serializes reloads of the tenants file; guards tenants and onTenants
	tenants   filewatch.Set
	onTenants func(*Tenants) error

	stop chan struct{}
	done chan struct{}
	once sync.Once

	// testHookReloaded, when set before Start, is called after each poll.
	testHookReloaded func()
}

// New loads every file the configuration names and fails, naming the file,
// when one is missing or bad. It starts no goroutine but the JWKS URL's
// refresher; Start starts the watcher; Close stops both.
func New(cfg Config) (*Security, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReloadInterval == 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	if cfg.JWT != nil && cfg.TenantsFile == "" {
		return nil, errors.New("security: JWT authentication needs a tenants file, which maps JWT subjects to tenants")
	}
	if n := cfg.Limits.MaxHeaderBytes; n != 0 && (n < MinMaxHeaderBytes || n > MaxMaxHeaderBytes) {
		return nil, fmt.Errorf("security: limits: max header bytes: must be %d to %d, got %d", MinMaxHeaderBytes, MaxMaxHeaderBytes, n)
	}
	s := &Security{cfg: cfg, log: cfg.Logger, auth: &Authenticator{log: cfg.Logger}}
	if cfg.TLS != nil {
		t, err := NewTLS(*cfg.TLS)
		if err != nil {
			return nil, err
		}
		s.tls = t
	}
	if cfg.TenantsFile != "" {
		s.tenants = filewatch.New(cfg.TenantsFile)
		if _, err := s.reloadTenants(true); err != nil {
			return nil, err
		}
	}
	if cfg.JWT != nil {
		v, err := newJWTVerifier(*cfg.JWT)
		if err != nil {
			return nil, err
		}
		s.auth.jwt = v
	}
	return s, nil
}

// Start starts the watcher, which reloads each file set that changed
// every ReloadInterval and logs what it took or refused.
func (s *Security) Start() {
	if s.cfg.ReloadInterval < 0 || s.stop != nil {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.watch()
}

func (s *Security) watch() {
	defer close(s.done)
	tick := time.NewTicker(s.cfg.ReloadInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			_ = s.reload(false)
			if s.testHookReloaded != nil {
				s.testHookReloaded()
			}
		}
	}
}

// Close stops the watcher and the JWKS refresher. Idempotent.
func (s *Security) Close() {
	s.once.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		if s.auth.jwt != nil {
			s.auth.jwt.close()
		}
	})
}

// Reload reloads every file, changed or not (batcherd calls it on SIGHUP).
// Each set (TLS, tenants, JWKS) that fails keeps its old version; the
// errors are logged and returned, joined.
func (s *Security) Reload() error { return s.reload(true) }

func (s *Security) reload(force bool) error {
	var errs []error
	note := func(what string, changed bool, err error) {
		switch {
		case err != nil:
			s.log.Error("security: reload refused; the old "+what+" stays in force", "err", err)
			errs = append(errs, err)
		case changed:
			s.log.Info("security: reloaded " + what)
		}
	}
	if s.tls != nil {
		changed, err := s.tls.Reload(force)
		note("certificate", changed, err)
	}
	if s.cfg.TenantsFile != "" {
		changed, err := s.reloadTenants(force)
		note("tenants", changed, err)
	}
	if v := s.auth.jwt; v != nil {
		changed, err := v.reloadFile(force)
		note("JWKS", changed, err)
	}
	// Open streams are authenticated again on every poll, changed files
	// or not: a JWT expires, and a JWKS URL refreshes on its own.
	if s.cfg.TenantsFile != "" {
		s.auth.Revalidate(context.Background())
	}
	return errors.Join(errs...)
}

func (s *Security) reloadTenants(force bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stamps, load, err := s.tenants.Changed(force)
	if err != nil {
		return false, fmt.Errorf("tenants file: %w", err)
	}
	if !load {
		return false, nil
	}
	ts, err := s.loadTenants()
	if err == nil && s.onTenants != nil {
		if err = s.onTenants(ts); err != nil {
			err = fmt.Errorf("tenants file %s: %w", s.cfg.TenantsFile, err)
		}
	}
	s.tenants.Done(stamps, err)
	if err != nil {
		return false, err
	}
	s.auth.SetTenants(ts)
	return true, nil
}

// OnTenants calls f with the tenants in force now, and again with every
// tenants file a reload takes, before the authenticator sees it: an error
// from f refuses that file whole, as a bad file is refused, and the old
// tenants stay. Without a tenants file f is never called. batcherd hands
// the tenants' weights and quotas to the core this way.
func (s *Security) OnTenants(f func(*Tenants) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onTenants = f
	if ts := s.auth.Tenants(); ts != nil {
		return f(ts)
	}
	return nil
}

func (s *Security) loadTenants() (*Tenants, error) {
	data, err := readLimited(s.cfg.TenantsFile, MaxTenantsFileBytes)
	if err != nil {
		return nil, fmt.Errorf("tenants file: %w", err)
	}
	ts, err := ParseTenants(data)
	if err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", s.cfg.TenantsFile, err)
	}
	return ts, nil
}

// TLSOn reports whether listeners serve TLS.
func (s *Security) TLSOn() bool { return s.tls != nil }

// AuthOn reports whether callers must authenticate: a tenants file, or
// client certificates that the TLS handshake requires.
func (s *Security) AuthOn() bool {
	return s.cfg.TenantsFile != "" ||
		(s.cfg.TLS != nil && s.cfg.TLS.ClientCAFile != "" && s.cfg.TLS.ClientAuth == ClientCertRequire)
}

// Authenticator returns the authenticator all listeners share.
func (s *Security) Authenticator() *Authenticator { return s.auth }

// TLSConfig returns a tls.Config for a listener speaking nextProtos, or
// nil when TLS is off. For an HTTP listener:
//
//	srv.TLSConfig = sec.TLSConfig("h2", "http/1.1")
//	srv.ServeTLS(lis, "", "") // the files come from the config
func (s *Security) TLSConfig(nextProtos ...string) *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.ServerConfig(nextProtos...)
}

// GRPCServerOptions returns the options that secure a gRPC server: the
// TLS credentials (when on), the limits, and authentication as
// interceptors (after any given earlier, such as recovery).
func (s *Security) GRPCServerOptions() []grpc.ServerOption {
	opts := s.cfg.Limits.serverOptions()
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.ServerConfig("h2"))))
	}
	return append(opts,
		grpc.ChainUnaryInterceptor(s.auth.UnaryInterceptors()...),
		grpc.ChainStreamInterceptor(s.auth.StreamInterceptors()...),
	)
}

// MaxHeaderBytes is Limits.MaxHeaderBytes with its default: every HTTP
// listener sets it as its http.Server's MaxHeaderBytes, which bounds
// HTTP/1.1 headers and HTTP/2 header lists alike.
func (s *Security) MaxHeaderBytes() int { return s.cfg.Limits.withDefaults().MaxHeaderBytes }

// Listener bounds lis's open connections (Limits.MaxConnections). TLS is
// not done here: the gRPC server's credentials do it, and an HTTP server
// takes TLSConfig.
func (s *Security) Listener(lis net.Listener) net.Listener { return s.cfg.Limits.listener(lis) }

// HTTPMiddleware authenticates HTTP requests; see Authenticator.HTTPMiddleware.
func (s *Security) HTTPMiddleware(next http.Handler) http.Handler {
	return s.auth.HTTPMiddleware(next)
}

// CheckBind is CheckBind with this configuration's TLS and authentication.
func (s *Security) CheckBind(name, addr string, insecure bool) error {
	return CheckBind(name, addr, s.TLSOn(), s.AuthOn(), insecure)
}
