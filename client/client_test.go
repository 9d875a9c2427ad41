package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestSubmit(t *testing.T) {
	failed := status.New(codes.Unavailable, "no healthy backend").Proto()
	srv := &fakeServer{submit: func(_ context.Context, r *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
		switch r.GetRequest().GetModel() {
		case "full":
			return nil, status.Error(codes.ResourceExhausted, "queue full: capacity 1000")
		case "failed":
			return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{Id: "x", Error: failed}}, nil
		case "empty":
			return &batcherv1.SubmitResponse{}, nil
		}
		return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{
			Id: "x", Output: &batcherv1.Completion_Text{Text: echo(r.GetRequest())},
		}}, nil
	}}
	c := newClient(t, srv)
	ctx := t.Context()

	tests := []struct {
		model    string
		wantText string
		wantComp bool
		wantCode codes.Code
	}{
		{model: "sim-chat", wantText: "echo: hello", wantComp: true, wantCode: codes.OK},
		{model: "full", wantCode: codes.ResourceExhausted},
		{model: "failed", wantComp: true, wantCode: codes.Unavailable},
		{model: "empty", wantCode: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			comp, err := c.Submit(ctx, client.Chat(tt.model, client.User("hello")))
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("Submit: code %v (%v), want %v", got, err, tt.wantCode)
			}
			if (comp != nil) != tt.wantComp {
				t.Fatalf("Submit: completion %v, want one: %v", comp, tt.wantComp)
			}
			if got := comp.GetText(); got != tt.wantText {
				t.Errorf("Submit: text %q, want %q", got, tt.wantText)
			}
		})
	}
}

func TestSubmitCallOptions(t *testing.T) {
	srv := &fakeServer{submit: func(ctx context.Context, _ *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, status.Error(codes.FailedPrecondition, "no deadline")
		}
		return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{}}, nil
	}}
	c := client.New(serve(t, srv), client.WithCallOptions(grpc.WaitForReady(true)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := c.Submit(ctx, client.Complete("m", "p"), grpc.MaxCallRecvMsgSize(1<<20)); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close of a New client: %v", err)
	}
}

// Dial's connection carries the caller's trace context to the server.
func TestDialPropagatesTrace(t *testing.T) {
	got := make(chan string, 1)
	srv := &fakeServer{submit: func(ctx context.Context, _ *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- firstOf(md.Get("traceparent"))
		return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{Output: &batcherv1.Completion_Text{Text: "ok"}}}, nil
	}}
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer()
	batcherv1.RegisterBatcherServiceServer(gs, srv)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })

	c, err := client.Dial("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	ctx := trace.ContextWithSpanContext(t.Context(), testSpan)
	comp, err := c.Submit(ctx, client.Complete("m", "p"))
	if err != nil || comp.GetText() != "ok" {
		t.Fatalf("Submit = %v, %v", comp, err)
	}
	tp := <-got
	if want := "00-" + testSpan.TraceID().String() + "-"; len(tp) < len(want) || tp[:len(want)] != want {
		t.Errorf("server saw traceparent %q, want the caller's trace %s", tp, testSpan.TraceID())
	}
}

var testSpan = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
})

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func TestRequestBuilders(t *testing.T) {
	u := func(v int32) *int32 { return &v }
	f := func(v float32) *float32 { return &v }
	i := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		got  *batcherv1.Request
		want *batcherv1.Request
	}{
		{
			name: "chat",
			got:  client.Chat("sim-chat", client.System("Be brief."), client.User("Hi"), client.Assistant("Hello."), client.Message("tool", "{}")),
			want: &batcherv1.Request{Model: "sim-chat", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{
				{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"},
				{Role: "assistant", Content: "Hello."}, {Role: "tool", Content: "{}"},
			}}}},
		},
		{
			name: "empty chat",
			got:  client.Chat("sim-chat"),
			want: &batcherv1.Request{Model: "sim-chat", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{}}},
		},
		{
			name: "completion with every option",
			got: client.Complete("sim-complete", "Once", client.WithID("a"), client.WithPriority(batcherv1.Priority_PRIORITY_HIGH),
				client.WithMaxTokens(16), client.WithTemperature(0.5), client.WithTopP(0.9), client.WithStop("\n", "."),
				client.WithSeed(7), client.WithTimeout(2*time.Second), client.WithMetadata("k", "v"), client.WithMetadata("k2", "v2"),
				client.WithDedup(batcherv1.Dedup_DEDUP_OFF)),
			want: &batcherv1.Request{
				Id: "a", Model: "sim-complete", Priority: batcherv1.Priority_PRIORITY_HIGH,
				Input:    &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: "Once"}},
				Params:   &batcherv1.GenerationParams{MaxTokens: u(16), Temperature: f(0.5), TopP: f(0.9), Stop: []string{"\n", "."}, Seed: i(7)},
				Timeout:  durationpb.New(2 * time.Second),
				Metadata: map[string]string{"k": "v", "k2": "v2"},
				Dedup:    batcherv1.Dedup_DEDUP_OFF,
			},
		},
		{
			name: "embedding",
			got:  client.Embed("sim-embed", "text"),
			want: &batcherv1.Request{Model: "sim-embed", Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "text"}}},
		},
		{
			name: "message turns a non-chat input into a chat",
			got:  client.Complete("m", "p", client.User("u")),
			want: &batcherv1.Request{Model: "m", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{{Role: "user", Content: "u"}}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !proto.Equal(tt.got, tt.want) {
				t.Errorf("got %v\nwant %v", tt.got, tt.want)
			}
		})
	}
}
