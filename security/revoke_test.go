package security

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestRevocationReachesOpenStreams: after a reload that revokes the
// credential a SubmitStream was opened with, the stream refuses new
// requests with an UNAUTHENTICATED Rejection and ends UNAUTHENTICATED,
// after the requests it accepted completed. One row per way to revoke.
func TestRevocationReachesOpenStreams(t *testing.T) {
	k1, k2 := newSigner(t, "k1"), newSigner(t, "k2")
	for _, tc := range []struct {
		name string
		// token returns the credential the stream is opened with.
		token func(t *testing.T, tokA string) string
		// revoke changes the files; Reload follows.
		revoke func(t *testing.T, p *pki, tokA, tokB string)
		// poll: revocation comes with time (an expiry), not a file.
		poll bool
	}{
		{"token removed", func(_ *testing.T, tokA string) string { return tokA }, func(t *testing.T, p *pki, _, tokB string) {
			writeFile(t, p.tenantsFile, tenantsYAML(newToken(t), tokB))
		}, false},
		{"tenant removed", func(_ *testing.T, tokA string) string { return tokA }, func(t *testing.T, p *pki, _, tokB string) {
			writeFile(t, p.tenantsFile, fmt.Appendf(nil, "tenants:\n  - name: batch\n    tokens: [%s]\n", HashToken(tokB)))
		}, false},
		{"routes narrowed", func(_ *testing.T, tokA string) string { return tokA }, func(t *testing.T, p *pki, tokA, _ string) {
			writeFile(t, p.tenantsFile, fmt.Appendf(nil, "tenants:\n  - name: search\n    tokens: [%s]\n    routes: [embed]\n", HashToken(tokA)))
		}, false},
		{"JWKS key removed", func(t *testing.T, _ string) string { return k1.token(t, "search-svc", time.Hour) }, func(t *testing.T, p *pki, _, _ string) {
			writeFile(t, p.jwksFile, jwks(t, k2))
		}, false},
		{"JWT expired", func(t *testing.T, _ string) string { return k1.token(t, "search-svc", time.Second) }, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPKI(t)
			tokA, tokB := newToken(t), newToken(t)
			writeFile(t, p.tenantsFile, tenantsYAML(tokA, tokB))
			writeFile(t, p.jwksFile, jwks(t, k1, k2))
			sec, err := New(Config{TenantsFile: p.tenantsFile, ReloadInterval: -1,
				JWT: &JWTConfig{JWKSFile: p.jwksFile, Issuer: testIssuer, Audience: testAudience, Leeway: time.Nanosecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer sec.Close()
			c := dial(t, benchEnv(t, sec), nil)
			s, err := c.SubmitStream(withToken(testCtx(t), tc.token(t, tokA)))
			if err != nil {
				t.Fatal(err)
			}
			send := func(id string) {
				t.Helper()
				if err := s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: chatRequest(id)}}); err != nil {
					t.Fatal(err)
				}
			}
			recv := func() *batcherv1.SubmitStreamResponse {
				t.Helper()
				for {
					m, err := s.Recv()
					if err != nil {
						t.Fatalf("stream ended early: %v", err)
					}
					if m.GetCompletion() != nil || m.GetRejection() != nil {
						return m
					}
				}
			}
			send("before")
			if m := recv(); m.GetCompletion().GetId() != "before" || m.GetCompletion().GetError() != nil {
				t.Fatalf("before revocation: %v", m)
			}
			if tc.revoke != nil {
				tc.revoke(t, p, tokA, tokB)
			}
			for sec.Authenticator().OpenStreams() > 0 { // an expiry: each poll authenticates the stream again
				_ = sec.Reload()
				if !tc.poll {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if n := sec.Authenticator().OpenStreams(); n != 0 {
				t.Fatalf("%d streams still registered after the reload", n)
			}
			// The stream may have ended already (nothing was in flight): then
			// Send fails with io.EOF and Recv gives the status.
			_ = s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: chatRequest("after")}})
			var end error
			var rejected bool
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					end = err
					break
				}
				if r := m.GetRejection(); r != nil && r.GetId() == "after" && codes.Code(r.GetError().GetCode()) == codes.Unauthenticated {
					rejected = true
				}
				if m.GetCompletion() != nil {
					t.Fatalf("a completion after revocation: %v", m)
				}
			}
			// The stream may end before "after" arrives: then it was never accepted.
			if status.Code(end) != codes.Unauthenticated {
				t.Fatalf("stream ended with %v (rejected %v), want UNAUTHENTICATED", end, rejected)
			}
		})
	}
}
