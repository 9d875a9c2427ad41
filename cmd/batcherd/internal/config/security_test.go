package config_test

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/security"
)

func TestSecurityDefaults(t *testing.T) {
	c := config.Default()
	o := c.Security.Options()
	if o.TLS != nil || o.TenantsFile != "" || o.JWT != nil || c.Security.Insecure {
		t.Fatalf("security is on by default: %+v", o)
	}
	if o.Limits.MaxConnections != security.DefaultMaxConnections || o.Limits.KeepaliveMinTime != security.DefaultKeepaliveMinTime ||
		o.ReloadInterval != security.DefaultReloadInterval {
		t.Fatalf("limits %+v", o.Limits)
	}
}

func TestSecurityFlagsAndEnv(t *testing.T) {
	args := []string{"--listen=0.0.0.0:1", "--insecure", "--tls-cert=c.pem", "--tls-key=k.pem", "--tls-client-ca=ca.pem",
		"--tenants=t.yaml", "--jwks-url=https://idp.test/jwks", "--jwt-issuer=https://idp.test", "--jwt-audience=batcher"}
	c, err := config.Load(args, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, c *config.Config) {
		t.Helper()
		s := c.Security
		if !s.Insecure || s.TLS.CertFile != "c.pem" || s.TLS.KeyFile != "k.pem" || s.TLS.ClientCAFile != "ca.pem" ||
			s.TenantsFile != "t.yaml" || s.JWT == nil || s.JWT.JWKSURL != "https://idp.test/jwks" || s.JWT.Issuer != "https://idp.test" || s.JWT.Audience != "batcher" {
			t.Errorf("got %+v (jwt %+v)", s, s.JWT)
		}
		o := s.Options()
		if o.TLS == nil || o.TLS.ClientAuth != security.ClientCertRequire || o.JWT == nil {
			t.Errorf("options %+v", o)
		}
	}
	check(t, c)
	c, err = config.Load(nil, env("BATCHER_LISTEN", "0.0.0.0:1", "BATCHER_INSECURE", "true", "BATCHER_TLS_CERT", "c.pem", "BATCHER_TLS_KEY", "k.pem",
		"BATCHER_TLS_CLIENT_CA", "ca.pem", "BATCHER_TENANTS", "t.yaml", "BATCHER_JWKS_URL", "https://idp.test/jwks",
		"BATCHER_JWT_ISSUER", "https://idp.test", "BATCHER_JWT_AUDIENCE", "batcher"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check(t, c)

	file := writeFile(t, `
listen: 0.0.0.0:1
security:
  tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem, client_auth: optional}
  tenants_file: t.yaml
  jwt: {jwks_file: j.json, tenant_claim: team, refresh: 5m, leeway: 10s}
  reload_interval: 1s
  limits:
    max_connections: -1
    max_concurrent_streams: 10
    max_recv_msg_bytes: 1024
    max_send_msg_bytes: 2048
    handshake_timeout: 3s
    max_header_bytes: 8192
    conn_window_bytes: 1048576
    keepalive: {min_time: 1m, permit_without_stream: true, time: 1h, timeout: 5s, max_connection_idle: 10m, max_connection_age: 5m, max_connection_age_grace: 0s}
`)
	c, err = config.Load([]string{"--config", file}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Security.Options()
	want := security.Limits{MaxConnections: -1, MaxConcurrentStreams: 10, MaxRecvMsgBytes: 1024, MaxSendMsgBytes: 2048,
		HandshakeTimeout: 3 * time.Second, MaxHeaderBytes: 8192, KeepaliveMinTime: time.Minute, KeepalivePermitWithoutStream: true,
		KeepaliveTime: time.Hour, KeepaliveTimeout: 5 * time.Second, MaxConnectionIdle: 10 * time.Minute, MaxConnectionAge: 5 * time.Minute, MaxConnectionAgeGrace: -1,
		ConnWindowBytes: 1 << 20}
	if o.Limits != want || o.TLS.ClientAuth != security.ClientCertOptional || o.JWT.JWKSFile != "j.json" ||
		o.JWT.TenantClaim != "team" || o.JWT.Refresh != 5*time.Minute || o.ReloadInterval != time.Second {
		t.Errorf("options %+v, jwt %+v", o, o.JWT)
	}
}

func TestSecurityErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		yaml string
		want string
	}{
		{"non-loopback", []string{"--listen=0.0.0.0:1"}, "", "--insecure"},
		{"TLS without auth", []string{"--listen=0.0.0.0:1", "--tls-cert=c", "--tls-key=k"}, "", "no authentication"},
		{"auth without TLS", []string{"--listen=10.1.2.3:1", "--tenants=t"}, "", "no TLS"},
		{"cert without key", []string{"--tls-cert=c"}, "", "security.tls: cert_file (--tls-cert) and key_file (--tls-key) go together"},
		{"client CA without TLS", []string{"--tls-client-ca=ca"}, "", "security.tls.client_ca_file (--tls-client-ca): needs cert_file"},
		{"client auth", nil, "security: {tls: {client_auth: maybe}}", `security.tls.client_auth: must be require or optional, got "maybe"`},
		{"jwt without tenants", []string{"--jwks-file=j"}, "", "security.jwt: needs tenants_file"},
		{"jwt both", []string{"--tenants=t", "--jwks-file=j", "--jwks-url=https://x/j"}, "", "exactly one of jwks_file and jwks_url"},
		{"jwt http", []string{"--tenants=t", "--jwks-url=http://idp.test/j"}, "", "security.jwt.jwks_url (--jwks-url): must be https"},
		{"jwt credentials", []string{"--tenants=t", "--jwks-url=https://u:hunter2@idp.test/j"}, "", "security.jwt.jwks_url (--jwks-url): must not carry credentials"},
		{"insecure value", nil, "", ""},
		{"limits", nil, "security: {limits: {max_connections: 0, max_recv_msg_bytes: 0, keepalive: {min_time: 0s}}}", "security.limits.max_connections: must be at least 1, or -1"},
		{"limits keepalive", nil, "security: {limits: {keepalive: {min_time: 0s}}}", "security.limits.keepalive.min_time: must be positive"},
		{"max connection age grace", nil, "security: {limits: {keepalive: {max_connection_age_grace: -1s}}}", "security.limits.keepalive.max_connection_age_grace: must not be negative, got -1s"},
		{"max connection age", nil, "security: {limits: {keepalive: {max_connection_age: -1s}}}", "security.limits.keepalive.max_connection_age: must not be negative, got -1s"},
		{"max header bytes", nil, "security: {limits: {max_header_bytes: 100}}", "security.limits.max_header_bytes: must be 4096 to 16777216, got 100"},
		{"max header bytes zero", nil, "security: {limits: {max_header_bytes: 0}}", "security.limits.max_header_bytes: must be 4096 to 16777216, got 0"},
		{"stream window", nil, "security: {limits: {stream_window_bytes: 1024}}", "security.limits.stream_window_bytes: must be 0 (dynamic) or 65535 (gRPC's minimum) to 2147483647, got 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.yaml != "" {
				args = append(args, "--config", writeFile(t, tc.yaml))
			}
			if tc.want == "" {
				_, err := config.Load([]string{"--insecure=maybe"}, env(), io.Discard)
				if err == nil {
					t.Fatal("--insecure=maybe accepted")
				}
				return
			}
			_, err := config.Load(args, env(), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error %q shows a password", err)
			}
		})
	}
	// http is allowed on loopback.
	if _, err := config.Load([]string{"--tenants=t", "--jwks-url=http://127.0.0.1:8080/j"}, env(), io.Discard); err != nil {
		t.Fatal(err)
	}
}

func TestSecurityHelp(t *testing.T) {
	var sb strings.Builder
	if _, err := config.Load([]string{"-h"}, env(), &sb); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	for _, want := range []string{"-insecure", "-tls-cert", "BATCHER_TLS_CERT", "-tls-key", "-tls-client-ca", "-tenants", "BATCHER_TENANTS", "-jwks-url"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}
