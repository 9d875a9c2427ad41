package security

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/server"
)

// benchEnv is the real core and server, with an instant backend, served
// over a real loopback port with sec.
func benchEnv(b testing.TB, sec *Security) string {
	b.Helper()
	instant := batcher.BackendFunc(func(_ context.Context, bt *batcher.Batch, out []batcher.Response) error {
		for i := range bt.Requests {
			out[i].Text = "ok"
			out[i].FinishReason = batcher.FinishStop
		}
		return nil
	})
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "fake", Backend: instant, MaxConcurrency: 64}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "fake",
			Batch: batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 32}}),
	)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(core, server.WithLogger(quiet), server.WithAccessFunc(AccessFrom))
	if err != nil {
		b.Fatal(err)
	}
	gs := server.NewGRPCServer(nil, sec.GRPCServerOptions()...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	lis = sec.Listener(lis)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

func chatRequest(id string) *batcherv1.Request {
	return &batcherv1.Request{Id: id, Model: "chat", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{
		Messages: []*batcherv1.ChatMessage{{Role: "user", Content: "hello"}}}}}
}

// benchSetups are the sides of the comparison: plaintext without
// authentication (batcherd's default); TLS with a JWT checked against a
// JWKS file, its signature verified once a minute per token (the cache);
// and the same with the signature verified on every call.
func benchSetups(b *testing.B) []struct {
	name   string
	sec    *Security
	client *tls.Config
	token  string
} {
	p := newPKI(b)
	k := newSigner(b, "k1")
	writeFile(b, p.jwksFile, jwks(b, k))
	writeFile(b, p.tenantsFile, tenantsYAML(newToken(b), newToken(b)))
	plain, err := New(Config{ReloadInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	secure, err := New(Config{
		TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, TenantsFile: p.tenantsFile, ReloadInterval: -1,
		JWT: &JWTConfig{JWKSFile: p.jwksFile, Issuer: testIssuer, Audience: testAudience},
	})
	if err != nil {
		b.Fatal(err)
	}
	uncached, err := New(Config{
		TLS: &TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, TenantsFile: p.tenantsFile, ReloadInterval: -1,
		JWT: &JWTConfig{JWKSFile: p.jwksFile, Issuer: testIssuer, Audience: testAudience},
	})
	if err != nil {
		b.Fatal(err)
	}
	uncached.auth.jwt.noCache = true
	b.Cleanup(plain.Close)
	b.Cleanup(secure.Close)
	b.Cleanup(uncached.Close)
	return []struct {
		name   string
		sec    *Security
		client *tls.Config
		token  string
	}{
		{"plaintext", plain, nil, ""},
		{"tls-jwt", secure, p.clientTLS(), k.token(b, "search-svc", time.Hour)},
		{"tls-jwt-uncached", uncached, p.clientTLS(), k.token(b, "search-svc", time.Hour)},
	}
}

// BenchmarkSubmit compares unary Submit round trips, 16 callers per core
// on one connection, plaintext without authentication against TLS with a
// JWT. Run it with -count 6 and compare the medians (benchstat).
func BenchmarkSubmit(b *testing.B) {
	for _, s := range benchSetups(b) {
		b.Run("setup="+s.name, func(b *testing.B) {
			c := dial(b, benchEnv(b, s.sec), s.client)
			ctx := context.Background()
			if s.token != "" {
				ctx = withToken(ctx, s.token)
			}
			b.ReportAllocs()
			b.SetParallelism(16) // 32 callers on 2 cores: batches fill, CPU is what limits
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := &batcherv1.SubmitRequest{Request: chatRequest("")}
				for pb.Next() {
					if _, err := c.Submit(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkStream measures requests through one SubmitStream, completions
// only, plaintext against TLS with a JWT (checked once, at the stream's
// start).
func BenchmarkStream(b *testing.B) {
	for _, s := range benchSetups(b) {
		b.Run("setup="+s.name, func(b *testing.B) {
			c := dial(b, benchEnv(b, s.sec), s.client)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if s.token != "" {
				ctx = withToken(ctx, s.token)
			}
			st, err := c.SubmitStream(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Options{
				Options: &batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}}}); err != nil {
				b.Fatal(err)
			}
			msgs := make([]*batcherv1.SubmitStreamRequest, b.N)
			for i := range msgs {
				msgs[i] = &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: chatRequest(fmt.Sprint(i))}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for _, m := range msgs {
					if st.Send(m) != nil {
						return
					}
				}
				_ = st.CloseSend()
			}()
			for done := 0; done < b.N; {
				m, err := st.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if m.GetCompletion() != nil {
					done++
				}
			}
			b.StopTimer()
			for {
				if _, err := st.Recv(); err != nil {
					break
				}
			}
		})
	}
}

// BenchmarkAuthenticate measures one call's authentication alone, without
// the network: a bearer token's hash lookup, a JWT from the cache, and a
// JWT verified in full (ES256).
func BenchmarkAuthenticate(b *testing.B) {
	p := newPKI(b)
	k := newSigner(b, "k1")
	writeFile(b, p.jwksFile, jwks(b, k))
	tok := newToken(b)
	writeFile(b, p.tenantsFile, tenantsYAML(tok, newToken(b)))
	sec, err := New(Config{TenantsFile: p.tenantsFile, ReloadInterval: -1,
		JWT: &JWTConfig{JWKSFile: p.jwksFile, Issuer: testIssuer, Audience: testAudience}})
	if err != nil {
		b.Fatal(err)
	}
	defer sec.Close()
	a := sec.Authenticator()
	jwtTok := "Bearer " + k.token(b, "search-svc", time.Hour)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		authz   string
		noCache bool
	}{
		{"setup=token", "Bearer " + tok, false},
		{"setup=jwt-cached", jwtTok, false},
		{"setup=jwt-uncached", jwtTok, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			a.jwt.noCache = c.noCache
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.authenticate(ctx, c.authz, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
