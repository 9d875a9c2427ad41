package security

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// tenantsYAML is a tenants file with two tenants: search (token tokA,
// routes chat only, ceiling normal, lowered; SPIFFE and JWT subjects) and
// batch (token tokB, every route, ceiling low, refused).
func tenantsYAML(tokA, tokB string) []byte {
	return fmt.Appendf(nil, `tenants:
  - name: search
    tokens: [%s]
    jwt_subjects: [search-svc]
    spiffe_ids: [spiffe://example.org/ns/search/sa/api]
    routes: [chat]
    max_priority: normal
    weight: 3
    quotas: {rpm: 600, tpm: 100000, queue_share: 0.5, in_flight: 64, jobs: 4, items_per_job: 1000}
  - name: batch
    tokens: [%s]
    cert_subjects: ["CN=batch-client,O=Example"]
    max_priority: low
    priority_mode: refuse
    admin: true
`, HashToken(tokA), HashToken(tokB))
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
}

// wantUnauthenticated checks that a refusal says nothing more than that.
func wantUnauthenticated(t *testing.T, err error) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.Unauthenticated || st.Message() != "unauthenticated" || len(st.Details()) != 0 {
		t.Fatalf("got %v, want a bare UNAUTHENTICATED", err)
	}
}

func TestTokensOverTLS(t *testing.T) {
	p := newPKI(t)
	tokA, tokB := newToken(t), newToken(t)
	writeFile(t, p.tenantsFile, tenantsYAML(tokA, tokB))
	log, logs := newLog()
	sec, err := New(Config{TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, TenantsFile: p.tenantsFile, Logger: log, ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	addr := serve(t, sec)
	c := dial(t, addr, p.clientTLS())
	ctx := testCtx(t)

	got, err := submit(withToken(ctx, tokA), c, "chat", batcherv1.Priority_PRIORITY_LOW)
	if err != nil || got.GetMetadata()["tenant"] != "search" {
		t.Fatalf("token A: %v %v, want tenant search", got, err)
	}
	got, err = submit(withToken(ctx, tokB), c, "embed", batcherv1.Priority_PRIORITY_DEFERRABLE)
	if err != nil || got.GetMetadata()["tenant"] != "batch" {
		t.Fatalf("token B: %v %v, want tenant batch", got, err)
	}
	for name, ctx := range map[string]context.Context{
		"none":        ctx,
		"unknown":     withToken(ctx, newToken(t)),
		"short":       withToken(ctx, "abc"),
		"hash itself": withToken(ctx, HashToken(tokA)),
		"basic":       metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+tokA),
		"huge":        withToken(ctx, strings.Repeat("x", MaxTokenBytes+1)),
	} {
		_, err := submit(ctx, c, "chat", 0)
		t.Run(name, func(t *testing.T) { wantUnauthenticated(t, err) })
	}
	if strings.Contains(logs.String(), tokA) || strings.Contains(logs.String(), tokB) {
		t.Fatalf("a token reached the log:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "unknown bearer token") {
		t.Errorf("the debug log does not say why:\n%s", logs)
	}
	// TLS 1.1 is refused at the handshake.
	old := p.clientTLS()
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if conn, err := tls.Dial("tcp", addr, old); err == nil {
		_ = conn.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
	// Health checks need no credential.
	conn := dialConn(t, addr, p.clientTLS())
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without credentials: %v", err)
	}
}

// TestTenantAccess: a tenant's routes, ceiling and mode from the tenants
// file reach the core's one admission rule (Tenant.Access, AccessFrom);
// the anonymous tenant and a call without a tenant admit everything.
func TestTenantAccess(t *testing.T) {
	ts, err := ParseTenants(tenantsYAML(newToken(t), newToken(t)))
	if err != nil {
		t.Fatal(err)
	}
	search, batch := ts.Tenant("search").Access(), ts.Tenant("batch").Access()
	if search.Tenant != "search" || ts.Tenant("search").Access() != search {
		t.Fatalf("search's access %+v is not built once", search)
	}
	admit := func(a *batcher.Access, route string, p batcher.Priority) (batcher.Request, error) {
		r := batcher.Request{Route: route, Priority: p}
		return r, a.Admit(&r)
	}
	if _, err := admit(search, "embed", batcher.PriorityLow); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), `route "embed"`) {
		t.Errorf("search on embed: %v, want forbidden naming the route", err)
	}
	if r, err := admit(search, "chat", batcher.PriorityUrgent); err != nil || r.Priority != batcher.PriorityNormal || r.Tenant != "search" {
		t.Errorf("search urgent: %+v %v, want lowered to normal, as search", r, err)
	}
	for _, p := range []batcher.Priority{batcher.PriorityNormal, batcher.PriorityHigh} {
		if _, err := admit(batch, "chat", p); !errors.Is(err, ErrForbidden) {
			t.Errorf("batch at %v: %v, want forbidden (refuse mode)", p, err)
		}
	}
	if r, err := admit(batch, "anything", batcher.PriorityLow); err != nil || r.Tenant != "batch" {
		t.Errorf("batch at low: %+v %v", r, err)
	}
	if a := anonymous.Access(); a != nil {
		t.Errorf("the anonymous tenant's access %+v, want nil", a)
	}
	if a := AccessFrom(context.Background()); a != nil {
		t.Errorf("AccessFrom without a tenant: %+v", a)
	}
	if a := AccessFrom(WithTenant(context.Background(), ts.Tenant("batch"))); a != batch {
		t.Errorf("AccessFrom: %+v", a)
	}
}

func TestAnonymousWithoutTenants(t *testing.T) {
	sec, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	if sec.AuthOn() || sec.TLSOn() {
		t.Fatal("the zero Config turned security on")
	}
	c := dial(t, serve(t, sec), nil)
	got, err := submit(testCtx(t), c, "anything", batcherv1.Priority_PRIORITY_URGENT)
	if err != nil || got.GetMetadata()["tenant"] != AnonymousName || got.GetMetadata()["priority"] != "PRIORITY_URGENT" {
		t.Fatalf("%v %v, want the anonymous tenant, priority kept", got, err)
	}
}

func TestMTLSIdentities(t *testing.T) {
	p := newPKI(t)
	writeFile(t, p.tenantsFile, tenantsYAML(newToken(t), newToken(t)))
	sec, err := New(Config{
		TLS:         &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile},
		TenantsFile: p.tenantsFile, ReloadInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	addr := serve(t, sec)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		tenant string // "": refused
		code   codes.Code
	}{
		{"spiffe", ptr(p.clientCA.clientCert(t, leafOpts{cn: "whatever", spiffe: "spiffe://example.org/ns/search/sa/api"})), "search", codes.OK},
		{"subject", ptr(p.clientCA.clientCert(t, leafOpts{cn: "batch-client", org: "Example"})), "batch", codes.OK},
		{"unmapped spiffe", ptr(p.clientCA.clientCert(t, leafOpts{cn: "batch-client", org: "Example", spiffe: "spiffe://example.org/other"})), "", codes.Unauthenticated},
		{"unmapped subject", ptr(p.clientCA.clientCert(t, leafOpts{cn: "nobody"})), "", codes.Unauthenticated},
		// Refused in the handshake: the RPC fails UNAVAILABLE.
		{"other CA", ptr(newCA(t, "rogue").clientCert(t, leafOpts{cn: "batch-client", org: "Example"})), "", codes.Unavailable},
		{"expired", ptr(p.clientCA.clientCert(t, leafOpts{cn: "batch-client", org: "Example", notAfter: time.Now().Add(-time.Minute)})), "", codes.Unavailable},
		{"no certificate", nil, "", codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var certs []tls.Certificate
			if tc.cert != nil {
				certs = append(certs, *tc.cert)
			}
			got, err := submit(ctx, dial(t, addr, p.clientTLS(certs...)), "chat", batcherv1.Priority_PRIORITY_LOW)
			if tc.tenant == "" {
				if tc.code == codes.Unauthenticated {
					wantUnauthenticated(t, err)
				} else {
					wantCode(t, err, tc.code)
				}
				return
			}
			if err != nil || got.GetMetadata()["tenant"] != tc.tenant {
				t.Fatalf("%v %v, want tenant %s", got, err, tc.tenant)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestCertRotationMidStream rotates the server certificate while a stream
// is open: the stream keeps working, and a new connection sees the new
// certificate. The client CA rotates too: a client of the new CA gets in.
func TestCertRotationMidStream(t *testing.T) {
	p := newPKI(t)
	sec, err := New(Config{TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile}, ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	addr := serve(t, sec)
	ctx := testCtx(t)
	var mu sync.Mutex
	var cns []string
	cfg := p.clientTLS(p.clientCA.clientCert(t, leafOpts{cn: "c1"}))
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		cns = append(cns, cs.PeerCertificates[0].Subject.CommonName)
		mu.Unlock()
		return nil
	}
	c := dial(t, addr, cfg)
	s, err := c.SubmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(id string) {
		t.Helper()
		if err := s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: &batcherv1.Request{Id: id}}}); err != nil {
			t.Fatal(err)
		}
		m, err := s.Recv()
		if err != nil || m.GetCompletion().GetId() != id {
			t.Fatalf("%v %v, want the completion of %s", m, err, id)
		}
	}
	roundTrip("before")

	newClientCA := newCA(t, "client CA 2")
	p.rotateServer(t, "server-2")
	writeFile(t, p.clientCAFile, newClientCA.pem)
	if changed, err := sec.tls.Reload(false); err != nil || !changed {
		t.Fatalf("Reload: %v %v, want a change", changed, err)
	}
	roundTrip("after") // the open stream, on its old session
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}

	// A new connection: the new certificate, and only the new client CA.
	cfg2 := p.clientTLS(newClientCA.clientCert(t, leafOpts{cn: "c2"}))
	cfg2.VerifyConnection = cfg.VerifyConnection
	if _, err := submit(ctx, dial(t, addr, cfg2), "chat", 0); err != nil {
		t.Fatalf("a client of the new CA: %v", err)
	}
	_, err = submit(ctx, dial(t, addr, p.clientTLS(p.clientCA.clientCert(t, leafOpts{cn: "old"}))), "chat", 0)
	wantCode(t, err, codes.Unavailable)
	mu.Lock()
	defer mu.Unlock()
	if len(cns) != 2 || cns[0] != "server-1" || cns[1] != "server-2" {
		t.Fatalf("server certificates seen %v, want [server-1 server-2]", cns)
	}
}

func TestTLSReloadRefusesBadFiles(t *testing.T) {
	p := newPKI(t)
	tl, err := NewTLS(TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	old := tl.Certificate()
	// A key that does not match: refused, the old pair stays, and the same
	// bad set is not retried until it changes.
	_, otherKey := p.serverCA.issue(t, leafOpts{cn: "x"})
	writeFile(t, p.keyFile, otherKey)
	if changed, err := tl.Reload(false); err == nil || changed {
		t.Fatalf("mismatched key: %v %v, want refused", changed, err)
	}
	if tl.Certificate() != old {
		t.Fatal("the old certificate was dropped")
	}
	if changed, err := tl.Reload(false); err != nil || changed {
		t.Fatalf("unchanged bad files: %v %v, want no retry", changed, err)
	}
	// An expired certificate is refused too.
	cp, kp := p.serverCA.issue(t, leafOpts{cn: "expired", notAfter: time.Now().Add(-time.Minute)})
	writeFile(t, p.keyFile, kp)
	writeFile(t, p.certFile, cp)
	if _, err := tl.Reload(false); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: %v", err)
	}
	p.rotateServer(t, "good")
	if changed, err := tl.Reload(false); err != nil || !changed || tl.Certificate().Leaf.Subject.CommonName != "good" {
		t.Fatalf("good files: %v %v", changed, err)
	}
	if tl.ServerConfig().MinVersion != tls.VersionTLS12 {
		t.Fatal("TLS below 1.2 allowed")
	}
}

func TestJWKSFile(t *testing.T) {
	p := newPKI(t)
	writeFile(t, p.tenantsFile, tenantsYAML(newToken(t), newToken(t)))
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	writeFile(t, p.jwksFile, jwks(t, k1))
	log, logs := newLog()
	sec, err := New(Config{
		TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, TenantsFile: p.tenantsFile,
		JWT:    &JWTConfig{JWKSFile: p.jwksFile, Issuer: testIssuer, Audience: testAudience},
		Logger: log, ReloadInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	c := dial(t, serve(t, sec), p.clientTLS())
	ctx := testCtx(t)
	good := k1.token(t, "search-svc", time.Hour)
	if got, err := submit(withToken(ctx, good), c, "chat", 0); err != nil || got.GetMetadata()["tenant"] != "search" {
		t.Fatalf("good JWT: %v %v", got, err)
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "search-svc", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix()})
	hs.Header["kid"] = "k1"
	hsRaw, _ := hs.SignedString([]byte("secret"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "search-svc", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for name, tok := range map[string]string{
		"expired":        k1.token(t, "search-svc", -time.Hour),
		"no exp":         k1.token(t, "search-svc", time.Hour, func(c jwt.MapClaims) { delete(c, "exp") }),
		"wrong issuer":   k1.token(t, "search-svc", time.Hour, func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }),
		"wrong audience": k1.token(t, "search-svc", time.Hour, func(c jwt.MapClaims) { c["aud"] = "other" }),
		"not yet valid":  k1.token(t, "search-svc", time.Hour, func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() }),
		"unmapped sub":   k1.token(t, "stranger", time.Hour),
		"unknown key":    k2.token(t, "search-svc", time.Hour),
		"HS256":          hsRaw,
		"none":           none,
		"tampered":       good[:len(good)-4] + "AAAA",
	} {
		_, err := submit(withToken(ctx, tok), c, "chat", 0)
		t.Run(name, func(t *testing.T) { wantUnauthenticated(t, err) })
	}
	// Rotation: k2 replaces k1 in the file.
	writeFile(t, p.jwksFile, jwks(t, k2))
	if err := sec.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := submit(withToken(ctx, k2.token(t, "search-svc", time.Hour)), c, "chat", 0); err != nil || got.GetMetadata()["tenant"] != "search" {
		t.Fatalf("k2 after rotation: %v %v", got, err)
	}
	_, err = submit(withToken(ctx, good), c, "chat", 0)
	wantUnauthenticated(t, err) // cached before, but the cache empties on reload
	if strings.Contains(logs.String(), good) {
		t.Fatal("a JWT reached the log")
	}
}

func TestJWKSURLRotation(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	var mu sync.Mutex
	doc := jwks(t, k1)
	fetches := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fetches++
		_, _ = w.Write(doc)
	}))
	defer srv.Close()
	p := newPKI(t)
	writeFile(t, p.tenantsFile, tenantsYAML(newToken(t), newToken(t)))
	sec, err := New(Config{
		TenantsFile: p.tenantsFile, ReloadInterval: -1,
		JWT: &JWTConfig{JWKSURL: srv.URL, Issuer: testIssuer, Audience: testAudience, HTTPClient: srv.Client(), UnknownKIDEvery: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	c := dial(t, serve(t, sec), nil)
	ctx := testCtx(t)
	if _, err := submit(withToken(ctx, k1.token(t, "search-svc", time.Hour)), c, "chat", 0); err != nil {
		t.Fatalf("k1: %v", err)
	}
	mu.Lock()
	doc = jwks(t, k2)
	mu.Unlock()
	// k2's kid is unknown: the URL is fetched again at once.
	if got, err := submit(withToken(ctx, k2.token(t, "search-svc", time.Hour)), c, "chat", 0); err != nil || got.GetMetadata()["tenant"] != "search" {
		t.Fatalf("k2 after rotation: %v %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fetches < 2 {
		t.Fatalf("%d fetches, want a refetch on the unknown kid", fetches)
	}
}

func TestTenantsReload(t *testing.T) {
	p := newPKI(t)
	tokA, tokB, tokC := newToken(t), newToken(t), newToken(t)
	writeFile(t, p.tenantsFile, tenantsYAML(tokA, tokB))
	log, logs := newLog()
	sec, err := New(Config{TenantsFile: p.tenantsFile, Logger: log, ReloadInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{}, 1)
	sec.testHookReloaded = func() {
		select {
		case polled <- struct{}{}:
		default:
		}
	}
	sec.Start()
	defer sec.Close()
	waitPolls := func() { // two polls: the one under way may predate the write
		<-polled
		<-polled
	}
	c := dial(t, serve(t, sec), nil)
	ctx := testCtx(t)

	// A bad file, with a plain token where a hash belongs: refused whole,
	// logged without the token, the old tenants still serve.
	writeFile(t, p.tenantsFile, fmt.Appendf(nil, "tenants:\n  - name: c\n    tokens: [%s]\n", tokC))
	waitPolls()
	if _, err := submit(withToken(ctx, tokA), c, "chat", 0); err != nil {
		t.Fatalf("old tenant after a bad reload: %v", err)
	}
	if !strings.Contains(logs.String(), "reload refused") || !strings.Contains(logs.String(), "tenants[0].tokens[0]") {
		t.Errorf("the refusal is not logged with its reason:\n%s", logs)
	}
	if strings.Contains(logs.String(), tokC) {
		t.Fatal("the plain token reached the log")
	}
	// A good file: C in, A out.
	writeFile(t, p.tenantsFile, fmt.Appendf(nil, "tenants:\n  - name: c\n    tokens: [%s]\n", HashToken(tokC)))
	waitPolls()
	if got, err := submit(withToken(ctx, tokC), c, "chat", 0); err != nil || got.GetMetadata()["tenant"] != "c" {
		t.Fatalf("new tenant: %v %v", got, err)
	}
	_, err = submit(withToken(ctx, tokA), c, "chat", 0)
	wantUnauthenticated(t, err)
}

func TestHTTPMiddleware(t *testing.T) {
	p := newPKI(t)
	tokA, tokB := newToken(t), newToken(t)
	writeFile(t, p.tenantsFile, tenantsYAML(tokA, tokB))
	sec, err := New(Config{TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, TenantsFile: p.tenantsFile, ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	mux := http.NewServeMux()
	mux.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, TenantFrom(r.Context()).Name)
	}))
	mux.Handle("/admin", RequireAdmin(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "admin") })))
	srv := httptest.NewUnstartedServer(sec.HTTPMiddleware(mux))
	srv.TLS = sec.TLSConfig("h2", "http/1.1")
	srv.StartTLS()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientTLS(), ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Errorf("HTTP/%d, want HTTP/2 over TLS", resp.ProtoMajor)
		}
		return resp.StatusCode, string(body)
	}
	if code, body := get("/v1/x", tokA); code != 200 || body != "search" {
		t.Fatalf("token A: %d %q", code, body)
	}
	// Refusals carry OpenAI's whole error object, param and code included,
	// as the front door's own errors do.
	unauthenticated := `{"error":{"message":"unauthenticated","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` + "\n"
	if code, body := get("/v1/x", newToken(t)); code != 401 || body != unauthenticated {
		t.Fatalf("unknown token: %d %q, want %q", code, body, unauthenticated)
	}
	if code, body := get("/v1/x", ""); code != 401 || body != unauthenticated {
		t.Fatalf("no token: %d %q", code, body)
	}
	forbidden := `{"error":{"message":"the admin right is needed","type":"permission_error","param":null,"code":"forbidden"}}` + "\n"
	if code, body := get("/admin", tokA); code != 403 || body != forbidden {
		t.Fatalf("admin without the right: %d %q, want %q", code, body, forbidden)
	}
	if code, body := get("/admin", tokB); code != 200 || body != "admin" {
		t.Fatalf("admin: %d %q", code, body)
	}
}

func TestLimits(t *testing.T) {
	sec, err := New(Config{Limits: Limits{MaxRecvMsgBytes: 1024, KeepaliveMinTime: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	addr := serve(t, sec)
	ctx := testCtx(t)
	c := dial(t, addr, nil)
	_, err = c.Submit(ctx, &batcherv1.SubmitRequest{Request: &batcherv1.Request{Model: strings.Repeat("m", 2048)}})
	wantCode(t, err, codes.ResourceExhausted)

	// A client pinging far more often than the policy allows is sent away
	// with GOAWAY ENHANCE_YOUR_CALM "too_many_pings". (gRPC's own client
	// will not ping more often than every 10 s: this speaks raw HTTP/2.)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	w, fr := http2.NewFramer(conn, nil), http2.NewFramer(nil, conn)
	if err := w.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := uint64(0); ; i++ {
			var data [8]byte
			binary.BigEndian.PutUint64(data[:], i)
			if w.WritePing(false, data) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without GOAWAY: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" {
				t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.ErrCode, ga.DebugData())
			}
			break
		}
	}
}

func TestCheckBind(t *testing.T) {
	for _, tc := range []struct {
		addr                   string
		tlsOn, authOn, insecur bool
		ok                     bool
	}{
		{"127.0.0.1:1", false, false, false, true},
		{"[::1]:1", false, false, false, true},
		{"localhost:1", false, false, false, true},
		{"0.0.0.0:1", false, false, false, false},
		{":1", true, false, false, false},
		{"10.0.0.1:1", false, true, false, false},
		{"example.com:1", true, true, false, true},
		{"0.0.0.0:1", false, false, true, true},
	} {
		err := CheckBind("listen", tc.addr, tc.tlsOn, tc.authOn, tc.insecur)
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("%s: %v does not name --insecure", tc.addr, err)
		}
	}
}

func TestParseTenantsErrors(t *testing.T) {
	secret := newToken(t)
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{"", "empty"},
		{"tenants: []", "at least one tenant"},
		{"tenants:\n  - name: a\n    tokens: [" + secret + "]", "tenants[0].tokens[0]: must be sha256:"},
		{"tenants:\n  - name: a\n    tokens: {x: " + secret + "}", "cannot unmarshal !!map"},
		{"tenants:\n  - name: a\n    weight: " + secret, "value not shown"},
		{"tenants:\n  - name: a\n    token: [x]", "field token not found"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n  - name: a\n    jwt_subjects: [s]", `tenants[1].name: "a" names two tenants`},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n  - name: b\n    jwt_subjects: [s]", `tenants[1].jwt_subjects[0]: "s" is already mapped to tenant "a"`},
		{"tenants:\n  - name: a", "tenants[0]: has no credential"},
		{"tenants:\n  - name: anonymous\n    jwt_subjects: [s]", "reserved"},
		{"tenants:\n  - name: 'a b'\n    jwt_subjects: [s]", "tenants[0].name"},
		{"tenants:\n  - name: a\n    spiffe_ids: [https://x/y]", "tenants[0].spiffe_ids[0]: must be a SPIFFE ID"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    max_priority: top", "tenants[0].max_priority"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    priority_mode: drop", "tenants[0].priority_mode"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    weight: 5000", "tenants[0].weight: must be 1 to 1000"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {rpm: -1, queue_share: 2}", "tenants[0].quotas.rpm"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {tpm: 2000000000}", "tenants[0].quotas.tpm: must be 0 (no quota) to 1000000000, got 2000000000"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {queue_share: 1.5}", "tenants[0].quotas.queue_share: must be 0 (no quota) to 1, got 1.5"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {queue_share: .nan}", "tenants[0].quotas.queue_share"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {in_flight: -3}", "tenants[0].quotas.in_flight: must be 0 (no quota) to 1000000000, got -3"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {jobs: -1}", "tenants[0].quotas.jobs"},
		{"tenants:\n  - name: a\n    jwt_subjects: [s]\n    quotas: {items_per_job: -1}", "tenants[0].quotas.items_per_job"},
		{"tenants:\n  - name: a\n    tokens: [" + HashToken(secret) + ", " + HashToken(secret) + "]", "listed twice"},
	} {
		_, err := ParseTenants([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), HashToken(secret)[7:]) {
			t.Errorf("%q: the error %q shows a secret", tc.yaml, err)
		}
	}
	ts, err := ParseTenants(tenantsYAML(newToken(t), newToken(t)))
	if err != nil {
		t.Fatal(err)
	}
	s := ts.Tenant("search")
	if s.Weight != 3 || s.Quotas.RPM != 600 || s.Quotas.QueueShare != 0.5 || s.Admin || len(s.Routes) != 1 {
		t.Fatalf("search parsed as %+v", s)
	}
	if b := ts.Tenant("batch"); b.Weight != 1 || !b.Admin || b.PriorityMode != PriorityRefuse {
		t.Fatalf("batch parsed as %+v", b)
	}
	// The Tenant carries no credential: printing it shows no hash.
	if strings.Contains(fmt.Sprintf("%+v", *s), "sha256") {
		t.Fatal("a Tenant prints a token hash")
	}
}

// TestEdgeWithRealServer runs batcherd's admission (server.WithAccessFunc
// with AccessFrom) in front of the real core: on one stream, refused
// requests get Rejections while the completions flow, and the stream ends
// OK.
func TestEdgeWithRealServer(t *testing.T) {
	p := newPKI(t)
	tokA := newToken(t)
	writeFile(t, p.tenantsFile, fmt.Appendf(nil, "tenants:\n  - name: a\n    tokens: [%s]\n    routes: [chat]\n    max_priority: low\n    priority_mode: refuse\n", HashToken(tokA)))
	sec, err := New(Config{TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, TenantsFile: p.tenantsFile, ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	c := dial(t, benchEnv(t, sec), p.clientTLS())
	s, err := c.SubmitStream(withToken(testCtx(t), tokA))
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	go func() {
		for i := range n {
			r := chatRequest(fmt.Sprint(i))
			switch i % 3 {
			case 1:
				r.Model = "embed" // not allowed
			case 2:
				r.Priority = batcherv1.Priority_PRIORITY_LOW
			}
			if i%3 != 2 {
				r.Priority = batcherv1.Priority_PRIORITY_DEFERRABLE
			}
			if s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: r}}) != nil {
				return
			}
		}
		// One above the ceiling: refused.
		hi := chatRequest("high")
		hi.Priority = batcherv1.Priority_PRIORITY_HIGH
		_ = s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: hi}})
		_ = s.CloseSend()
	}()
	completed, rejected := map[string]bool{}, map[string]bool{}
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.GetCompletion() != nil:
			if m.GetCompletion().GetError() != nil {
				t.Fatalf("completion failed: %v", m)
			}
			completed[m.GetCompletion().GetId()] = true
		case m.GetRejection() != nil:
			if codes.Code(m.GetRejection().GetError().GetCode()) != codes.PermissionDenied {
				t.Fatalf("rejection %v", m)
			}
			rejected[m.GetRejection().GetId()] = true
		}
	}
	if len(completed) != 200 || len(rejected) != 101 || !rejected["high"] || !rejected["1"] || !completed["2"] {
		t.Fatalf("%d completed, %d rejected; want 200 and 101", len(completed), len(rejected))
	}
}

// TestTenantsReloadUnderLoad reloads the tenants file over and over while
// callers submit: no call is refused or lost.
func TestTenantsReloadUnderLoad(t *testing.T) {
	p := newPKI(t)
	tokA, tokB := newToken(t), newToken(t)
	files := [][]byte{tenantsYAML(tokA, tokB), tenantsYAML(tokA, newToken(t))}
	writeFile(t, p.tenantsFile, files[0])
	sec, err := New(Config{TenantsFile: p.tenantsFile, ReloadInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	c := dial(t, benchEnv(t, sec), nil)
	ctx := withToken(testCtx(t), tokA)
	const callers, calls = 8, 50
	errs := make(chan error, callers*calls)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls {
				_, err := c.Submit(ctx, &batcherv1.SubmitRequest{Request: chatRequest("")})
				errs <- err
			}
		})
	}
	stop := make(chan struct{})
	reloaded := make(chan int)
	go func() {
		n := 0
		defer func() { reloaded <- n }()
		for ; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			writeFile(t, p.tenantsFile, files[n%2])
			if err := sec.Reload(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	if n := <-reloaded; n < 2 {
		t.Logf("only %d reloads during the load", n)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed during reloads: %v", err)
		}
	}
}

func TestAdminOnly(t *testing.T) {
	p := newPKI(t)
	tokA, tokB := newToken(t), newToken(t)
	writeFile(t, p.tenantsFile, tenantsYAML(tokA, tokB))
	sec, err := New(Config{TenantsFile: p.tenantsFile, ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	u, s := AdminOnly(func(m string) bool { return m == batcherv1.BatcherService_Submit_FullMethodName })
	c := dial(t, serve(t, sec, grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s)), nil)
	ctx := testCtx(t)
	_, err = submit(withToken(ctx, tokA), c, "chat", batcherv1.Priority_PRIORITY_LOW)
	wantCode(t, err, codes.PermissionDenied)
	if _, err := submit(withToken(ctx, tokB), c, "chat", batcherv1.Priority_PRIORITY_LOW); err != nil {
		t.Fatalf("admin tenant: %v", err)
	}
	// Streams are not admin-only here: search may open one.
	st, err := c.SubmitStream(withToken(ctx, tokA))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream: %v", err)
	}
}

// TestMTLSOptional lets bearer callers in without a certificate while
// certificate callers are still verified and mapped.
func TestMTLSOptional(t *testing.T) {
	p := newPKI(t)
	tokA := newToken(t)
	writeFile(t, p.tenantsFile, tenantsYAML(tokA, newToken(t)))
	sec, err := New(Config{
		TLS:         &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile, ClientAuth: ClientCertOptional},
		TenantsFile: p.tenantsFile, ReloadInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sec.Close()
	addr := serve(t, sec)
	ctx := testCtx(t)
	if got, err := submit(withToken(ctx, tokA), dial(t, addr, p.clientTLS()), "chat", 0); err != nil || got.GetMetadata()["tenant"] != "search" {
		t.Fatalf("token without a certificate: %v %v", got, err)
	}
	cert := p.clientCA.clientCert(t, leafOpts{cn: "batch-client", org: "Example"})
	if got, err := submit(ctx, dial(t, addr, p.clientTLS(cert)), "chat", batcherv1.Priority_PRIORITY_LOW); err != nil || got.GetMetadata()["tenant"] != "batch" {
		t.Fatalf("certificate without a token: %v %v", got, err)
	}
	_, err = submit(ctx, dial(t, addr, p.clientTLS()), "chat", 0)
	wantUnauthenticated(t, err)
	rogue := newCA(t, "rogue").clientCert(t, leafOpts{cn: "batch-client", org: "Example"})
	// Go's client sends no certificate the server's CA list does not name;
	// force it, as another client might: a certificate given is verified.
	forced := p.clientTLS()
	forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogue, nil }
	_, err = submit(withToken(ctx, tokA), dial(t, addr, forced), "chat", 0)
	wantCode(t, err, codes.Unavailable)
}

// TestAdminFrom: the anonymous tenant has the admin right from loopback
// only; a configured admin tenant has it from anywhere.
func TestAdminFrom(t *testing.T) {
	admin := &Tenant{Name: "ops", Admin: true}
	for _, tc := range []struct {
		t    *Tenant
		addr string
		want bool
	}{
		{anonymous, "127.0.0.1:5000", true},
		{anonymous, "[::1]:5000", true},
		{anonymous, "10.1.2.3:5000", false},
		{anonymous, "", false},
		{admin, "10.1.2.3:5000", true},
		{&Tenant{Name: "user"}, "127.0.0.1:1", false},
		{nil, "127.0.0.1:1", false},
	} {
		if got := tc.t.AdminFrom(tc.addr); got != tc.want {
			t.Errorf("%v from %q: %v, want %v", tc.t, tc.addr, got, tc.want)
		}
	}
}
