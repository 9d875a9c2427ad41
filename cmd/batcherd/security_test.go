package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/client"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/security"
)

func TestRunRefusesNonLoopbackWithoutInsecure(t *testing.T) {
	var stderr strings.Builder
	if code := run(t.Context(), func() {}, []string{"--listen=0.0.0.0:0"}, noEnv, &stderr); code != exitConfig {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitConfig, stderr.String())
	}
	for _, want := range []string{"0.0.0.0:0 is not a loopback address", "no TLS", "no authentication", "--insecure"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q lacks %q", stderr.String(), want)
		}
	}
	_, stop, exit, logs := startInProcess(t, "--listen=0.0.0.0:0", "--insecure")
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("with --insecure: exit %d\n%s", code, logs)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "batcherd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// bearerToken is a PerRPCCredentials sending a bearer token.
type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearerToken) RequireTransportSecurity() bool { return true }

// waitLog waits for a log line holding want. The log is the only outside
// sign of a reload; it is polled, bounded by testTimeout.
func waitLog(t *testing.T, logs *logScanner, want string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q:\n%s", want, logs)
		}
		<-tick.C
	}
}

// TestRunTLSAndTenants serves batcherd over TLS with a tenants file: a
// caller with a token gets through, one without is refused, SIGHUP
// refuses a bad new file and takes a good one, and no token reaches the
// log.
func TestRunTLSAndTenants(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	tokA, tokB := base64.RawURLEncoding.EncodeToString(raw), "second-token-0123456789abcdefghij"
	tenants := filepath.Join(dir, "tenants.yaml")
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(tenants+".tmp", []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tenants+".tmp", tenants); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("tenants:\n  - name: team-a\n    tokens: [%s]\n    routes: [sim-embed]\n", security.HashToken(tokA)))
	cfgFile := filepath.Join(dir, "batcherd.yaml")
	if err := os.WriteFile(cfgFile, []byte("security: {reload_interval: -1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", cfgFile,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tenants", tenants)
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	dial := func(token string) *client.Client {
		t.Helper()
		opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(token)))
		}
		c, err := client.Dial(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := t.Context()
	a := dial(tokA)
	if _, err := a.Submit(ctx, client.Embed("sim-embed", "hello")); err != nil {
		t.Fatalf("Submit with token A: %v\n%s", err, logs)
	}
	if _, err := a.Submit(ctx, client.Embed("sim-chat", "hello")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a route team-a may not use: %v", err)
	}
	if _, err := dial("").Submit(ctx, client.Embed("sim-embed", "hello")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}

	// A bad file on SIGHUP: refused, A still in.
	write("tenants:\n  - name: team-b\n    tokens: [" + tokB + "]\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "reload refused")
	if _, err := a.Submit(ctx, client.Embed("sim-embed", "hello")); err != nil {
		t.Fatalf("token A after a refused reload: %v", err)
	}
	// A good one: B in, A out.
	write(fmt.Sprintf("tenants:\n  - name: team-b\n    tokens: [%s]\n", security.HashToken(tokB)))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "reloaded tenants")
	if _, err := dial(tokB).Submit(ctx, client.Embed("sim-embed", "hello")); err != nil {
		t.Fatalf("token B after the reload: %v", err)
	}
	if _, err := a.Submit(ctx, client.Embed("sim-embed", "hello")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("token A after the reload: %v", err)
	}
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d\n%s", code, logs)
	}
	for _, secret := range []string{tokA, tokB, security.HashToken(tokA)[7:], security.HashToken(tokB)[7:]} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a token or its hash reached the log:\n%s", logs)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"security","tls":true,"auth":true`) {
		t.Errorf("the start log does not say what protects the listener:\n%s", logs)
	}
}

// TestLogSecurityHidesSecrets: the start log names files and hosts, never
// a query string that may carry a key.
func TestLogSecurityHidesSecrets(t *testing.T) {
	sec, err := security.New(security.Config{ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	var sb strings.Builder
	log := slog.New(slog.NewJSONHandler(&sb, nil))
	cfg := &config.Config{Security: config.DefaultSecurity()}
	cfg.Security.JWT = &config.JWT{JWKSURL: "https://idp.test/jwks?access_token=s3cr3t-value", Issuer: "https://idp.test"}
	logSecurity(log, cfg, sec)
	if strings.Contains(sb.String(), "s3cr3t") || !strings.Contains(sb.String(), `"jwks":"https://idp.test/jwks"`) {
		t.Fatalf("log %s", sb.String())
	}
}

// TestAdminHandlerAnonymousLoopbackOnly: without a tenants file, the admin
// listener serves its admin pages to loopback callers only; probes and
// /metrics to anyone.
func TestAdminHandlerAnonymousLoopbackOnly(t *testing.T) {
	sec, err := security.New(security.Config{ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	h := adminHandler(sec, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	for _, tc := range []struct {
		path, remote string
		want         int
	}{
		{"/", "127.0.0.1:4000", 200}, {"/api/snapshot", "[::1]:4000", 200},
		{"/", "10.0.0.7:4000", 403}, {"/debug/pprof/", "10.0.0.7:4000", 403}, {"/api/snapshot", "10.0.0.7:4000", 403},
		{"/healthz", "10.0.0.7:4000", 200}, {"/metrics", "10.0.0.7:4000", 200},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s from %s: %d, want %d", tc.path, tc.remote, w.Code, tc.want)
		}
	}
}
