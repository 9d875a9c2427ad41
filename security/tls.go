package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/internal/filewatch"
)

// ClientAuth says whether a listener with a client CA requires client
// certificates.
type ClientAuth uint8

const (
	// ClientCertRequire refuses a handshake without a client certificate
	// that the client CA verifies.
	ClientCertRequire ClientAuth = iota
	// ClientCertOptional verifies a client certificate when one is given
	// and lets callers without one through to bearer authentication.
	ClientCertOptional
)

// TLSFiles names the PEM files of a listener's TLS.
type TLSFiles struct {
	CertFile string // the server's certificate chain
	KeyFile  string // its private key
	// ClientCAFile, when set, turns on mTLS: client certificates are
	// verified against the CAs in it.
	ClientCAFile string
	ClientAuth   ClientAuth
}

// TLS serves a listener's certificate and client CAs from their files and
// reloads them when the files change, without a restart: handshakes read the
// current state through GetConfigForClient and GetCertificate, so open
// connections keep their session and new ones see the new certificate.
// Every version it serves is TLS 1.2 or later.
type TLS struct {
	cfg   TLSFiles
	state atomic.Pointer[tlsState]

	mu    sync.Mutex // serializes Reload; guards files
	files filewatch.Set
}

type tlsState struct {
	gen  uint64
	cert *tls.Certificate
	pool *x509.CertPool // nil without a client CA
}

// NewTLS loads the files. It fails when a file is missing or unreadable,
// the key does not match the certificate, the certificate has expired, or
// the client CA file holds no certificate.
func NewTLS(files TLSFiles) (*TLS, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tls: both a certificate and a key file are needed")
	}
	names := []string{files.CertFile, files.KeyFile}
	if files.ClientCAFile != "" {
		names = append(names, files.ClientCAFile)
	}
	t := &TLS{cfg: files, files: filewatch.New(names...)}
	if _, err := t.reload(true); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reloads the files when any of them changed since the last load
// (size, modification time or inode). A new set that fails to load is
// refused whole and the old one keeps serving; it is tried again when the
// files change again. changed says whether new files were taken. With
// force, the files are loaded whether they changed or not.
func (t *TLS) Reload(force bool) (changed bool, err error) { return t.reload(force) }

func (t *TLS) reload(force bool) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	stamps, load, err := t.files.Changed(force)
	if err != nil {
		return false, fmt.Errorf("tls: %w", err)
	}
	if !load {
		return false, nil
	}
	st, err := t.load()
	t.files.Done(stamps, err)
	if err != nil {
		return false, err
	}
	if old := t.state.Load(); old != nil {
		st.gen = old.gen + 1
	}
	t.state.Store(st)
	return true, nil
}

func (t *TLS) load() (*tlsState, error) {
	cert, err := tls.LoadX509KeyPair(t.cfg.CertFile, t.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", t.cfg.CertFile, t.cfg.KeyFile, err)
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("tls: certificate %s expired at %s", t.cfg.CertFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	st := &tlsState{cert: &cert}
	if t.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(t.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA: %w", err)
		}
		st.pool = x509.NewCertPool()
		if !st.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client CA %s: no PEM certificate in it", t.cfg.ClientCAFile)
		}
	}
	return st, nil
}

// Certificate returns the certificate being served.
func (t *TLS) Certificate() *tls.Certificate { return t.state.Load().cert }

// ServerConfig returns a tls.Config for one listener, with the ALPN
// protocols it speaks ("h2" for gRPC; "h2" and "http/1.1" for net/http).
// Every listener built from the same TLS serves the same certificate and
// client CAs, reloaded together.
func (t *TLS) ServerConfig(nextProtos ...string) *tls.Config {
	l := &listenerTLS{t: t, protos: nextProtos}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         nextProtos,
		GetCertificate:     t.getCertificate,
		GetConfigForClient: l.configForClient,
	}
}

func (t *TLS) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return t.state.Load().cert, nil
}

// listenerTLS builds, once per loaded state, the config a listener's
// handshakes use.
type listenerTLS struct {
	t      *TLS
	protos []string
	cache  atomic.Pointer[builtConfig]
}

type builtConfig struct {
	gen uint64
	cfg *tls.Config
}

func (l *listenerTLS) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	st := l.t.state.Load()
	if b := l.cache.Load(); b != nil && b.gen == st.gen {
		return b.cfg, nil
	}
	cert := st.cert
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     l.protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
	}
	if st.pool != nil {
		cfg.ClientCAs = st.pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if l.t.cfg.ClientAuth == ClientCertOptional {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	l.cache.Store(&builtConfig{gen: st.gen, cfg: cfg})
	return cfg, nil
}
