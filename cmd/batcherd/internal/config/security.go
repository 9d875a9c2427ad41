package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/security"
)

// Security is the listener's transport security and authentication
// (package security). Left out, batcherd serves plaintext on loopback and
// every caller is one anonymous tenant.
type Security struct {
	// Insecure allows a listen address other than loopback without TLS or
	// without authentication; without it batcherd refuses to start so.
	Insecure bool `yaml:"insecure"`
	// TLS turns TLS on, and mTLS with a client CA.
	TLS ListenTLS `yaml:"tls"`
	// TenantsFile turns authentication on: the tenants, their token hashes,
	// JWT subjects, SPIFFE IDs and certificate subjects. Reloaded on SIGHUP
	// and when it changes.
	TenantsFile string `yaml:"tenants_file"`
	// JWT accepts JWTs as bearer tokens; needs tenants_file.
	JWT *JWT `yaml:"jwt"`
	// ReloadInterval is how often the TLS, tenants and JWKS files, and the
	// configuration file itself, are checked for changes; negative: only
	// on SIGHUP.
	ReloadInterval Duration `yaml:"reload_interval"`
	Limits         Limits   `yaml:"limits"`
}

// ListenTLS names the listener's PEM files.
type ListenTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth, with a client CA: require (a verified client certificate
	// for every connection) or optional (verified when given; callers
	// without one use bearer tokens).
	ClientAuth string `yaml:"client_auth"`
}

// JWT says how JWTs are verified (security.JWTConfig).
type JWT struct {
	JWKSFile    string   `yaml:"jwks_file"`
	JWKSURL     string   `yaml:"jwks_url"`
	Issuer      string   `yaml:"issuer"`
	Audience    string   `yaml:"audience"`
	TenantClaim string   `yaml:"tenant_claim"`
	Refresh     Duration `yaml:"refresh"`
	Leeway      Duration `yaml:"leeway"`
}

// Limits bound what clients may hold of the gRPC listener
// (security.Limits).
type Limits struct {
	// MaxConnections: -1 for no bound.
	MaxConnections       int      `yaml:"max_connections"`
	MaxConcurrentStreams int      `yaml:"max_concurrent_streams"`
	MaxRecvMsgBytes      int      `yaml:"max_recv_msg_bytes"`
	MaxSendMsgBytes      int      `yaml:"max_send_msg_bytes"`
	HandshakeTimeout     Duration `yaml:"handshake_timeout"`
	// MaxHeaderBytes bounds one request's headers on every listener
	// (gRPC, the HTTP front door, the admin listener), before
	// authentication (security.Limits.MaxHeaderBytes).
	MaxHeaderBytes int       `yaml:"max_header_bytes"`
	Keepalive      Keepalive `yaml:"keepalive"`
	// StreamWindowBytes and ConnWindowBytes, when set (at least 65535),
	// fix the HTTP/2 receive windows of each stream and each connection
	// (security.Limits); 0: grpc-go's dynamic windows. A fixed stream
	// window bounds what a stream the server has stopped reading holds of
	// its caller's messages.
	StreamWindowBytes int `yaml:"stream_window_bytes"`
	ConnWindowBytes   int `yaml:"conn_window_bytes"`
}

// Keepalive is the ping policy: clients pinging more often than MinTime get
// GOAWAY; the server pings idle connections every Time and closes those
// that do not answer within Timeout.
type Keepalive struct {
	MinTime             Duration `yaml:"min_time"`
	PermitWithoutStream bool     `yaml:"permit_without_stream"`
	Time                Duration `yaml:"time"`
	Timeout             Duration `yaml:"timeout"`
	// MaxConnectionIdle closes a connection without RPCs; 0: never.
	MaxConnectionIdle Duration `yaml:"max_connection_idle"`
	// MaxConnectionAge sends a GOAWAY to connections that old, so that
	// clients balancing over DNS reconnect and find new replicas and
	// authenticate again; open RPCs go on for MaxConnectionAgeGrace, then
	// the connection closes. Default 1h and 10m; 0: never (age), no
	// deadline (grace).
	MaxConnectionAge      Duration `yaml:"max_connection_age"`
	MaxConnectionAgeGrace Duration `yaml:"max_connection_age_grace"`
}

// DefaultSecurity returns the security settings' defaults.
func DefaultSecurity() Security {
	return Security{
		TLS:            ListenTLS{ClientAuth: "require"},
		ReloadInterval: Duration(security.DefaultReloadInterval),
		Limits: Limits{
			MaxConnections:       security.DefaultMaxConnections,
			MaxConcurrentStreams: security.DefaultMaxConcurrentStreams,
			MaxRecvMsgBytes:      security.DefaultMaxRecvMsgBytes,
			MaxSendMsgBytes:      security.DefaultMaxSendMsgBytes,
			HandshakeTimeout:     Duration(security.DefaultHandshakeTimeout),
			MaxHeaderBytes:       security.DefaultMaxHeaderBytes,
			Keepalive: Keepalive{
				MinTime:               Duration(security.DefaultKeepaliveMinTime),
				Time:                  Duration(security.DefaultKeepaliveTime),
				Timeout:               Duration(security.DefaultKeepaliveTimeout),
				MaxConnectionAge:      Duration(security.DefaultMaxConnectionAge),
				MaxConnectionAgeGrace: Duration(security.DefaultMaxConnectionAgeGrace),
			},
		},
	}
}

func init() {
	jwt := func(c *Config) *JWT {
		if c.Security.JWT == nil {
			c.Security.JWT = &JWT{}
		}
		return c.Security.JWT
	}
	str := func(field func(*Config) *string) func(*Config, string) error {
		return func(c *Config, v string) error { *field(c) = v; return nil }
	}
	settings = append(settings,
		setting{"security.insecure", "insecure", "BATCHER_INSECURE", "allow a non-loopback listen address without TLS or authentication", func(c *Config, v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			c.Security.Insecure = b
			return nil
		}},
		setting{"security.tls.cert_file", "tls-cert", "BATCHER_TLS_CERT", "TLS certificate chain (PEM); with --tls-key turns TLS on", str(func(c *Config) *string { return &c.Security.TLS.CertFile })},
		setting{"security.tls.key_file", "tls-key", "BATCHER_TLS_KEY", "TLS private key (PEM)", str(func(c *Config) *string { return &c.Security.TLS.KeyFile })},
		setting{"security.tls.client_ca_file", "tls-client-ca", "BATCHER_TLS_CLIENT_CA", "client CA (PEM): turns mTLS on", str(func(c *Config) *string { return &c.Security.TLS.ClientCAFile })},
		setting{"security.tenants_file", "tenants", "BATCHER_TENANTS", "tenants file (YAML): turns authentication on", str(func(c *Config) *string { return &c.Security.TenantsFile })},
		setting{"security.jwt.jwks_file", "jwks-file", "BATCHER_JWKS_FILE", "JWK Set file for verifying JWTs", str(func(c *Config) *string { return &jwt(c).JWKSFile })},
		setting{"security.jwt.jwks_url", "jwks-url", "BATCHER_JWKS_URL", "JWK Set URL for verifying JWTs, cached and refreshed", str(func(c *Config) *string { return &jwt(c).JWKSURL })},
		setting{"security.jwt.issuer", "jwt-issuer", "BATCHER_JWT_ISSUER", "required JWT iss claim", str(func(c *Config) *string { return &jwt(c).Issuer })},
		setting{"security.jwt.audience", "jwt-audience", "BATCHER_JWT_AUDIENCE", "required JWT aud claim", str(func(c *Config) *string { return &jwt(c).Audience })},
	)
	boolSettings["insecure"] = true
}

// boolSettings names the flags that take no value ("--insecure").
var boolSettings = map[string]bool{}

// securityDefault is defaultString for the security settings.
func securityDefault(c *Config, path string) string {
	if path == "security.insecure" {
		return strconv.FormatBool(c.Security.Insecure)
	}
	return ""
}

// validate checks the security settings, and that a listen address other
// than loopback has TLS and authentication or --insecure.
func (s *Security) validate(listen string, e *errs) {
	t := &s.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		e.add("security.tls", "cert_file (--tls-cert) and key_file (--tls-key) go together")
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		e.add("security.tls.client_ca_file", "needs cert_file and key_file: mTLS is TLS first")
	}
	if t.ClientAuth != "require" && t.ClientAuth != "optional" {
		e.add("security.tls.client_auth", "must be require or optional, got %q", t.ClientAuth)
	}
	if j := s.JWT; j != nil {
		if s.TenantsFile == "" {
			e.add("security.jwt", "needs tenants_file (--tenants), which maps JWT subjects to tenants")
		}
		switch u, err := url.Parse(j.JWKSURL); {
		case (j.JWKSFile == "") == (j.JWKSURL == ""):
			e.add("security.jwt", "set exactly one of jwks_file and jwks_url")
		case j.JWKSURL == "":
		case err != nil || u.Host == "":
			e.add("security.jwt.jwks_url", "not a URL with a host")
		case u.User != nil:
			e.add("security.jwt.jwks_url", "must not carry credentials")
		case u.Scheme != "https" && (u.Scheme != "http" || !security.IsLoopback(net.JoinHostPort(u.Hostname(), "0"))):
			e.add("security.jwt.jwks_url", "must be https (http only on loopback), got scheme %q", u.Scheme)
		}
		if j.Refresh < 0 {
			e.add("security.jwt.refresh", "must not be negative, got %v", j.Refresh)
		}
		if j.Leeway < 0 {
			e.add("security.jwt.leeway", "must not be negative, got %v", j.Leeway)
		}
	}
	l := &s.Limits
	if l.MaxConnections < 1 && l.MaxConnections != -1 {
		e.add("security.limits.max_connections", "must be at least 1, or -1 for no bound, got %d", l.MaxConnections)
	}
	for _, v := range []struct {
		path string
		n    int
	}{
		{"max_concurrent_streams", l.MaxConcurrentStreams},
		{"max_recv_msg_bytes", l.MaxRecvMsgBytes},
		{"max_send_msg_bytes", l.MaxSendMsgBytes},
	} {
		if v.n < 1 {
			e.add("security.limits."+v.path, "must be at least 1, got %d", v.n)
		}
	}
	if l.MaxHeaderBytes < security.MinMaxHeaderBytes || l.MaxHeaderBytes > security.MaxMaxHeaderBytes {
		e.add("security.limits.max_header_bytes", "must be %d to %d, got %d", security.MinMaxHeaderBytes, security.MaxMaxHeaderBytes, l.MaxHeaderBytes)
	}
	for _, v := range []struct {
		path string
		n    int
	}{
		{"stream_window_bytes", l.StreamWindowBytes},
		{"conn_window_bytes", l.ConnWindowBytes},
	} {
		if v.n != 0 && (v.n < security.MinWindowBytes || v.n > math.MaxInt32) {
			e.add("security.limits."+v.path, "must be 0 (dynamic) or %d (gRPC's minimum) to %d, got %d", security.MinWindowBytes, math.MaxInt32, v.n)
		}
	}
	for _, d := range []struct {
		path string
		v    Duration
	}{
		{"handshake_timeout", l.HandshakeTimeout},
		{"keepalive.min_time", l.Keepalive.MinTime},
		{"keepalive.time", l.Keepalive.Time},
		{"keepalive.timeout", l.Keepalive.Timeout},
	} {
		if d.v <= 0 {
			e.add("security.limits."+d.path, "must be positive, got %v", d.v)
		}
	}
	if l.Keepalive.MaxConnectionIdle < 0 {
		e.add("security.limits.keepalive.max_connection_idle", "must not be negative, got %v", l.Keepalive.MaxConnectionIdle)
	}
	if l.Keepalive.MaxConnectionAge < 0 {
		e.add("security.limits.keepalive.max_connection_age", "must not be negative, got %v", l.Keepalive.MaxConnectionAge)
	}
	if l.Keepalive.MaxConnectionAgeGrace < 0 {
		e.add("security.limits.keepalive.max_connection_age_grace", "must not be negative, got %v", l.Keepalive.MaxConnectionAgeGrace)
	}
	if err := s.CheckListener("listen", listen); err != nil {
		*e = append(*e, err)
	}
}

// CheckListener refuses a listener address other than loopback without
// TLS and authentication, unless insecure is set. Every listener's
// validation calls it with its own path ("http.listen", "admin.listen").
func (s *Security) CheckListener(path, addr string) error {
	return security.CheckBind(path, addr, s.TLS.CertFile != "", s.authOn(), s.Insecure)
}

// authOn reports whether callers must authenticate: a tenants file, or a
// client certificate that every handshake requires.
func (s *Security) authOn() bool {
	return s.TenantsFile != "" || (s.TLS.ClientCAFile != "" && s.TLS.ClientAuth == "require")
}

// neverIfZero maps the file's 0 ("never", "no deadline") onto
// security.Limits' negative; its 0 takes the default.
func neverIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Options returns the security package's configuration.
func (s *Security) Options() security.Config {
	cfg := security.Config{
		TenantsFile:    s.TenantsFile,
		ReloadInterval: s.ReloadInterval.D(),
		Limits: security.Limits{
			MaxConnections:               s.Limits.MaxConnections,
			MaxConcurrentStreams:         s.Limits.MaxConcurrentStreams,
			MaxRecvMsgBytes:              s.Limits.MaxRecvMsgBytes,
			MaxSendMsgBytes:              s.Limits.MaxSendMsgBytes,
			HandshakeTimeout:             s.Limits.HandshakeTimeout.D(),
			MaxHeaderBytes:               s.Limits.MaxHeaderBytes,
			KeepaliveMinTime:             s.Limits.Keepalive.MinTime.D(),
			KeepalivePermitWithoutStream: s.Limits.Keepalive.PermitWithoutStream,
			KeepaliveTime:                s.Limits.Keepalive.Time.D(),
			KeepaliveTimeout:             s.Limits.Keepalive.Timeout.D(),
			MaxConnectionIdle:            s.Limits.Keepalive.MaxConnectionIdle.D(),
			MaxConnectionAge:             neverIfZero(s.Limits.Keepalive.MaxConnectionAge.D()),
			MaxConnectionAgeGrace:        neverIfZero(s.Limits.Keepalive.MaxConnectionAgeGrace.D()),
			StreamWindowBytes:            s.Limits.StreamWindowBytes,
			ConnWindowBytes:              s.Limits.ConnWindowBytes,
		},
	}
	if t := s.TLS; t.CertFile != "" {
		cfg.TLS = &security.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}
		if t.ClientAuth == "optional" {
			cfg.TLS.ClientAuth = security.ClientCertOptional
		}
	}
	if j := s.JWT; j != nil {
		cfg.JWT = &security.JWTConfig{
			JWKSFile: j.JWKSFile, JWKSURL: j.JWKSURL, Issuer: j.Issuer, Audience: j.Audience,
			TenantClaim: j.TenantClaim, Refresh: j.Refresh.D(), Leeway: j.Leeway.D(),
		}
	}
	return cfg
}
