package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/client"
)

// testCA issues certificates for the mTLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

var serial int64 = 100

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf certificate and key in PEM: a server's for
// 127.0.0.1, or a client's with the SPIFFE ID spiffe.
func (ca *testCA) issue(t *testing.T, cn, spiffe string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if spiffe == "" {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		u, _ := url.Parse(spiffe)
		tmpl.URIs = []*url.URL{u}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TestRunMTLSRotationMidStream: batcherd requires client certificates and
// maps SPIFFE IDs to tenants. A stream opened before the server's
// certificate rotates keeps working on its connection; a connection made
// after sees the new certificate; a client without a certificate, or with
// an unmapped SPIFFE ID, does not get in.
func TestRunMTLSRotationMidStream(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	put := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(name+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(name+".tmp", name); err != nil {
			t.Fatal(err)
		}
	}
	c1, k1 := ca.issue(t, "server-1", "")
	put(certFile, c1)
	put(keyFile, k1)
	put(caFile, ca.pem)
	tenants := filepath.Join(dir, "tenants.yaml")
	put(tenants, []byte("tenants:\n  - {name: mesh-a, spiffe_ids: [\"spiffe://test/client-a\"]}\n"))
	cfgFile := writeConfig(t, "security: {reload_interval: -1s}\n")
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", cfgFile,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile, "--tenants", tenants)

	clientCert := func(spiffe string) []tls.Certificate {
		cp, kp := ca.issue(t, "client", spiffe)
		c, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	dial := func(certs []tls.Certificate) *client.Client {
		t.Helper()
		c, err := client.Dial(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.pool, Certificates: certs, MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := t.Context()
	serverCN := func(c *client.Client) string {
		t.Helper()
		var p peer.Peer
		if _, err := c.Submit(ctx, client.Embed("sim-embed", "who"), grpc.Peer(&p)); err != nil {
			t.Fatalf("Submit: %v\n%s", err, logs)
		}
		ti, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(ti.State.PeerCertificates) == 0 {
			t.Fatalf("no TLS peer: %+v", p.AuthInfo)
		}
		return ti.State.PeerCertificates[0].Subject.CommonName
	}
	a := dial(clientCert("spiffe://test/client-a"))
	if cn := serverCN(a); cn != "server-1" {
		t.Fatalf("server certificate %q", cn)
	}
	s, err := a.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Send(ctx, client.Embed("sim-embed", "before the rotation"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	c2, k2 := ca.issue(t, "server-2", "")
	put(certFile, c2)
	put(keyFile, k2)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "reloaded certificate")
	for i := range 3 { // the stream, on its old connection, goes on
		h, err := s.Send(ctx, client.Embed("sim-embed", fmt.Sprint("after the rotation ", i)))
		if err != nil {
			t.Fatalf("stream after the rotation: %v", err)
		}
		if _, err := h.Wait(ctx); err != nil {
			t.Fatalf("stream after the rotation: %v", err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if cn := serverCN(dial(clientCert("spiffe://test/client-a"))); cn != "server-2" {
		t.Fatalf("a new connection sees %q, want the rotated server-2", cn)
	}
	if _, err := dial(clientCert("spiffe://test/stranger")).Submit(ctx, client.Embed("sim-embed", "x")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unmapped SPIFFE ID: %v, want UNAUTHENTICATED", err)
	}
	if _, err := dial(nil).Submit(ctx, client.Embed("sim-embed", "x")); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no client certificate: %v, want the handshake refused", err)
	}
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d\n%s", code, logs)
	}
}
