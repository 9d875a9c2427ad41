package security

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// ca is a test certificate authority.
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

var serial atomic.Int64

func newCA(t testing.TB, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

type leafOpts struct {
	cn       string
	org      string
	spiffe   string
	client   bool
	notAfter time.Time
}

// issue returns a leaf certificate and key, PEM-encoded, for 127.0.0.1
// and localhost.
func (c *ca) issue(t testing.TB, o leafOpts) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if o.notAfter.IsZero() {
		o.notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: o.cn},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     o.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if o.org != "" {
		tmpl.Subject.Organization = []string{o.org}
	}
	if o.client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if o.spiffe != "" {
		u, err := url.Parse(o.spiffe)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// clientCert returns a tls.Certificate for a client.
func (c *ca) clientCert(t testing.TB, o leafOpts) tls.Certificate {
	t.Helper()
	o.client = true
	cp, kp := c.issue(t, o)
	cert, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// writeFile writes data to name atomically (a rename, as config
// management tools do).
func writeFile(t testing.TB, name string, data []byte) {
	t.Helper()
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// pki is a server CA and a client CA with the server's files on disk.
type pki struct {
	dir                   string
	serverCA, clientCA    *ca
	certFile, keyFile     string
	clientCAFile          string
	tenantsFile, jwksFile string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), serverCA: newCA(t, "server CA"), clientCA: newCA(t, "client CA")}
	p.certFile = filepath.Join(p.dir, "server.pem")
	p.keyFile = filepath.Join(p.dir, "server-key.pem")
	p.clientCAFile = filepath.Join(p.dir, "client-ca.pem")
	p.tenantsFile = filepath.Join(p.dir, "tenants.yaml")
	p.jwksFile = filepath.Join(p.dir, "jwks.json")
	p.rotateServer(t, "server-1")
	writeFile(t, p.clientCAFile, p.clientCA.pem)
	return p
}

// rotateServer writes a new server certificate and key.
func (p *pki) rotateServer(t testing.TB, cn string) {
	t.Helper()
	cp, kp := p.serverCA.issue(t, leafOpts{cn: cn})
	writeFile(t, p.keyFile, kp)
	writeFile(t, p.certFile, cp)
}

// clientTLS returns a client config trusting the server CA, recording the
// common name of each server certificate it sees.
func (p *pki) clientTLS(certs ...tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.serverCA.cert)
	return &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}
}

// fakeService answers each request with a Completion whose id is the
// request's and whose metadata says the tenant and the priority seen.
type fakeService struct {
	batcherv1.UnimplementedBatcherServiceServer
}

func answer(ctx context.Context, r *batcherv1.Request) *batcherv1.Completion {
	name := "<none>"
	if t := TenantFrom(ctx); t != nil {
		name = t.Name
	}
	return &batcherv1.Completion{Id: r.GetId(), Output: &batcherv1.Completion_Text{Text: "ok"},
		Metadata: map[string]string{"tenant": name, "priority": r.GetPriority().String()}}
}

func (fakeService) Submit(ctx context.Context, req *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
	return &batcherv1.SubmitResponse{Completion: answer(ctx, req.GetRequest())}, nil
}

func (fakeService) SubmitStream(s batcherv1.BatcherService_SubmitStreamServer) error {
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r := m.GetRequest(); r != nil {
			if err := s.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: answer(s.Context(), r)}}); err != nil {
				return err
			}
		}
	}
}

// serve serves the fake service with sec on a real loopback port.
func serve(t testing.TB, sec *Security, extra ...grpc.ServerOption) string {
	t.Helper()
	gs := grpc.NewServer(append(sec.GRPCServerOptions(), extra...)...)
	batcherv1.RegisterBatcherServiceServer(gs, fakeService{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis = sec.Listener(lis)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial returns a client of addr; cfg nil is plaintext.
func dial(t testing.TB, addr string, cfg *tls.Config, opts ...grpc.DialOption) batcherv1.BatcherServiceClient {
	t.Helper()
	return batcherv1.NewBatcherServiceClient(dialConn(t, addr, cfg, opts...))
}

func dialConn(t testing.TB, addr string, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(creds))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func submit(ctx context.Context, c batcherv1.BatcherServiceClient, model string, p batcherv1.Priority) (*batcherv1.Completion, error) {
	resp, err := c.Submit(ctx, &batcherv1.SubmitRequest{Request: &batcherv1.Request{Id: "r1", Model: model, Priority: p}})
	return resp.GetCompletion(), err
}

// logBuffer is a concurrency-safe log sink at debug level.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// signer makes JWTs with an ECDSA key and its JWKS.
type signer struct {
	kid string
	key *ecdsa.PrivateKey
}

func newSigner(t testing.TB, kid string) *signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{kid: kid, key: key}
}

func (s *signer) jwk() map[string]string {
	b := func(n *big.Int) string { return base64.RawURLEncoding.EncodeToString(n.FillBytes(make([]byte, 32))) }
	return map[string]string{"kty": "EC", "crv": "P-256", "kid": s.kid, "alg": "ES256", "use": "sig",
		"x": b(s.key.X), "y": b(s.key.Y)}
}

func jwks(t testing.TB, signers ...*signer) []byte {
	t.Helper()
	keys := make([]map[string]string, len(signers))
	for i, s := range signers {
		keys[i] = s.jwk()
	}
	data, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

const (
	testIssuer   = "https://issuer.test"
	testAudience = "batcher"
)

// token signs claims (sub, iss, aud, exp in from now) with s. exp is in
// whole seconds: it is rounded up, so that the token lives at least exp
// (rounded down, a token of one second lived anywhere from nothing to a
// second, and one made late in a second could expire before its first
// use).
func (s *signer) token(t testing.TB, sub string, exp time.Duration, mods ...func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	expires := now.Add(exp)
	expSec := expires.Unix()
	if expires.Nanosecond() > 0 {
		expSec++
	}
	claims := jwt.MapClaims{"sub": sub, "iss": testIssuer, "aud": testAudience, "exp": expSec, "iat": now.Unix()}
	for _, m := range mods {
		m(claims)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = s.kid
	raw, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

var quiet = slog.New(slog.DiscardHandler)
