package openai_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/llmsim"
	"github.com/batcherhq/batcher/server"
)

// grpcClient serves core through package server over an in-memory listener
// and returns a client, all torn down when the test ends.
func grpcClient(t *testing.T, core *batcher.Batcher) batcherv1.BatcherServiceClient {
	t.Helper()
	return batcherv1.NewBatcherServiceClient(grpcConn(t, core))
}

// grpcConn is grpcClient's connection.
func grpcConn(t *testing.T, core *batcher.Batcher) *grpc.ClientConn {
	t.Helper()
	srv, err := server.New(core, server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	gs := server.NewGRPCServer(nil)
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		gs.Stop()
		<-served
	})
	return conn
}

// TestClassesReachCallersAsGRPCCodes runs each upstream failure through the
// whole service: openai backend, core (no retries), server, gRPC client.
func TestClassesReachCallersAsGRPCCodes(t *testing.T) {
	t.Setenv("OPENAI_TEST_KEY", testKey)
	tests := []struct {
		name   string
		url    func(t *testing.T) string
		code   codes.Code
		retry  bool // a RetryInfo detail is expected
		expect string
	}{
		{"400 invalid request", func(t *testing.T) string {
			return answerT(t, 400, `{"error":{"message":"Invalid 'input': too long."}}`).URL
		}, codes.InvalidArgument, false, "Invalid 'input': too long."},
		{"404 unknown model", func(t *testing.T) string {
			return answerT(t, 404, `{"error":{"message":"The model 'x' does not exist"}}`).URL
		}, codes.FailedPrecondition, false, "HTTP 404 Not Found from /embeddings: The model 'x' does not exist"},
		{"401 auth", func(t *testing.T) string {
			return answerT(t, 401, `{"error":{"message":"Incorrect API key provided: %KEY%"}}`).URL
		}, codes.Internal, false, "credentials"},
		{"408 timeout", func(t *testing.T) string { return answerT(t, 408, ``).URL }, codes.DeadlineExceeded, false, "timed out"},
		{"429 rate limit", func(t *testing.T) string {
			return answerT(t, 429, `{"error":{"message":"slow down"}}`, "Retry-After", "3").URL
		}, codes.ResourceExhausted, true, "rate limit"},
		{"503 server", func(t *testing.T) string { return answerT(t, 503, `{"error":{"message":"overloaded"}}`).URL }, codes.Unavailable, false, "server error"},
		{"connection reset", func(t *testing.T) string {
			_, url := startSim(t, llmsim.Config{ResetRate: 1})
			return url
		}, codes.Unavailable, false, "unreachable"},
		{"malformed body", func(t *testing.T) string {
			_, url := startSim(t, llmsim.Config{MalformedRate: 1})
			return url
		}, codes.Internal, false, "invalid response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newBackend(t, openai.Config{BaseURL: tt.url(t), APIKeyEnv: "OPENAI_TEST_KEY"})
			core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be,
				Retry: batcher.RetryPolicy{MaxRetries: -1}, Breaker: batcher.BreakerConfig{Consecutive: -1}}},
				[]batcher.Route{{Name: "text-embedding-3-small", Op: batcher.OpEmbedding, Backend: "openai-main", Model: "sim-embedding",
					Batch: batcher.BatchConfig{Window: time.Millisecond}}})
			client := grpcClient(t, core)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.Submit(ctx, &batcherv1.SubmitRequest{Request: &batcherv1.Request{
				Model: "text-embedding-3-small",
				Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "hello"}},
			}})
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.expect) {
				t.Fatalf("status %v %q, want %v containing %q", st.Code(), st.Message(), tt.code, tt.expect)
			}
			if strings.Contains(st.Message(), "SECRET") || strings.Contains(st.Message(), "0123456789") {
				t.Fatalf("status leaks the key: %q", st.Message())
			}
			var ri *errdetails.RetryInfo
			for _, d := range st.Details() {
				if r, ok := d.(*errdetails.RetryInfo); ok {
					ri = r
				}
			}
			if tt.retry && (ri == nil || ri.GetRetryDelay().AsDuration() != 3*time.Second) {
				t.Fatalf("RetryInfo %v, want 3s from Retry-After", ri)
			}
		})
	}
}
