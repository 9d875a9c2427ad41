package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestSubmitChat(t *testing.T) {
	e := newEnv(t, newFake())
	req := chatReq("r1", "hello")
	req.Metadata = map[string]string{"tenant": "acme"}
	resp, err := e.client.Submit(testCtx(t), &batcherv1.SubmitRequest{Request: req})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	c := resp.GetCompletion()
	if c.GetId() != "r1" || c.GetText() != "echo: hello" || c.GetError() != nil {
		t.Fatalf("completion = %v", c)
	}
	if c.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_STOP {
		t.Errorf("finish reason = %v", c.GetFinishReason())
	}
	if u := c.GetUsage(); u.GetPromptTokens() != 5 || u.GetCompletionTokens() != 3 || u.GetTotalTokens() != 8 {
		t.Errorf("usage = %v", u)
	}
	if c.GetBatchId() == "" || c.GetBatchSize() != 1 || c.GetAttempts() != 1 || c.GetBackend() != "fake" {
		t.Errorf("batch fields = %q %d %d %q", c.GetBatchId(), c.GetBatchSize(), c.GetAttempts(), c.GetBackend())
	}
	if c.GetMetadata()["tenant"] != "acme" {
		t.Errorf("metadata = %v", c.GetMetadata())
	}
	tm := c.GetTimings()
	if tm == nil || tm.GetTotal().AsDuration() <= 0 || tm.GetTotal().AsDuration() < tm.GetQueued().AsDuration() {
		t.Errorf("timings = %v", tm)
	}
}

func TestSubmitCompletionAndEmbedding(t *testing.T) {
	e := newEnv(t, newFake())
	ctx := testCtx(t)
	resp, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: &batcherv1.Request{
		Id: "c", Model: routeComplete, Priority: batcherv1.Priority_PRIORITY_URGENT,
		Input: &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: "once"}},
	}})
	if err != nil || resp.GetCompletion().GetText() != "once..." {
		t.Fatalf("completion: %v, %v", resp, err)
	}
	resp, err = e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: &batcherv1.Request{
		Id: "e", Model: routeEmbed, Dedup: batcherv1.Dedup_DEDUP_OFF,
		Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "abc"}},
	}})
	if err != nil {
		t.Fatalf("embedding: %v", err)
	}
	if v := resp.GetCompletion().GetEmbedding().GetValues(); len(v) != 2 || v[0] != 3 {
		t.Fatalf("embedding = %v", v)
	}
}

func TestSubmitAssignsID(t *testing.T) {
	e := newEnv(t, newFake())
	ctx := testCtx(t)
	seen := map[string]bool{}
	for range 3 {
		resp, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("", "hi")})
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		id := resp.GetCompletion().GetId()
		if !strings.HasPrefix(id, "srv-") || seen[id] || len(id) > batcher.MaxIDBytes {
			t.Fatalf("assigned id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

// badRequests are the bad inputs of the issue, each with the field its
// INVALID_ARGUMENT must name.
func badRequests() []struct {
	name  string
	req   *batcherv1.Request
	field string
} {
	chat := func(mod func(r *batcherv1.Request)) *batcherv1.Request {
		r := chatReq("bad", "hello")
		mod(r)
		return r
	}
	return []struct {
		name  string
		req   *batcherv1.Request
		field string
	}{
		{"missing model", chat(func(r *batcherv1.Request) { r.Model = "" }), "request.model"},
		{"unknown model", chat(func(r *batcherv1.Request) { r.Model = "gpt-nope" }), "request.model"},
		{"no input", chat(func(r *batcherv1.Request) { r.Input = nil }), "request.input"},
		{"empty chat", chat(func(r *batcherv1.Request) { r.Input = &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{}} }), "request.chat.messages"},
		{"empty message", chat(func(r *batcherv1.Request) { r.GetChat().Messages[0].Content = "" }), "request.chat.messages"},
		{"bad role", chat(func(r *batcherv1.Request) { r.GetChat().Messages[0].Role = "wizard" }), "request.chat.messages[0].role"},
		{"wrong input shape", chat(func(r *batcherv1.Request) {
			r.Input = &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "x"}}
		}), "request.input"},
		{"empty prompt", &batcherv1.Request{Id: "bad", Model: routeComplete,
			Input: &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{}}}, "request.completion.prompt"},
		{"prompt over size limit", chat(func(r *batcherv1.Request) {
			r.GetChat().Messages[0].Content = strings.Repeat("x", testMaxInputBytes+1)
		}), "request.input"},
		{"temperature too high", chat(func(r *batcherv1.Request) {
			r.Params = &batcherv1.GenerationParams{Temperature: proto.Float32(3)}
		}), "request.params.temperature"},
		{"top_p zero", chat(func(r *batcherv1.Request) { r.Params = &batcherv1.GenerationParams{TopP: proto.Float32(0)} }), "request.params.top_p"},
		{"max_tokens zero", chat(func(r *batcherv1.Request) { r.Params = &batcherv1.GenerationParams{MaxTokens: proto.Int32(0)} }), "request.params.max_tokens"},
		{"max_tokens over limit", chat(func(r *batcherv1.Request) {
			r.Params = &batcherv1.GenerationParams{MaxTokens: proto.Int32(testMaxTokensLimit + 1)}
		}), "request.params.max_tokens"},
		{"too many stops", chat(func(r *batcherv1.Request) {
			r.Params = &batcherv1.GenerationParams{Stop: []string{"a", "b", "c", "d", "e"}}
		}), "request.params.stop"},
		{"negative timeout", chat(func(r *batcherv1.Request) { r.Timeout = durationpb.New(-time.Second) }), "request.timeout"},
		{"invalid timeout", chat(func(r *batcherv1.Request) { r.Timeout = &durationpb.Duration{Seconds: 1, Nanos: -5} }), "request.timeout"},
		{"unknown priority", chat(func(r *batcherv1.Request) { r.Priority = 42 }), "request.priority"},
		{"unknown dedup", chat(func(r *batcherv1.Request) { r.Dedup = 9 }), "request.dedup"},
		{"long id", chat(func(r *batcherv1.Request) { r.Id = strings.Repeat("i", batcher.MaxIDBytes+1) }), "request.id"},
		// The chat surface's deep fields, named by their proto path (the
		// caller never wrote the core's "input.chat...").
		{"tool call without id", chat(func(r *batcherv1.Request) {
			r.GetChat().Messages = append(r.GetChat().Messages, &batcherv1.ChatMessage{Role: "assistant",
				ToolCalls: []*batcherv1.ToolCall{{Id: "call_1", Name: "f"}, {Name: "f"}}})
		}), "request.chat.messages[1].tool_calls[1].id"},
		{"tool call bad name", chat(func(r *batcherv1.Request) {
			r.GetChat().Messages = append(r.GetChat().Messages, &batcherv1.ChatMessage{Role: "assistant",
				ToolCalls: []*batcherv1.ToolCall{{Id: "call_1", Name: "no spaces"}}})
		}), "request.chat.messages[1].tool_calls[0].name"},
		{"tool calls on a user message", chat(func(r *batcherv1.Request) {
			r.GetChat().Messages[0].ToolCalls = []*batcherv1.ToolCall{{Id: "call_1", Name: "f"}}
		}), "request.chat.messages[0].tool_calls"},
		{"tool_call_id on a user message", chat(func(r *batcherv1.Request) { r.GetChat().Messages[0].ToolCallId = "call_1" }),
			"request.chat.messages[0].tool_call_id"},
		{"image part with a bad url", chat(func(r *batcherv1.Request) {
			r.GetChat().Messages[0].Content = ""
			r.GetChat().Messages[0].Parts = []*batcherv1.ContentPart{{Part: &batcherv1.ContentPart_Image{Image: &batcherv1.ImagePart{Url: "ftp://x"}}}}
		}), "request.chat.messages[0].parts[0].image.url"},
		{"empty content part", chat(func(r *batcherv1.Request) {
			r.GetChat().Messages[0].Content = ""
			r.GetChat().Messages[0].Parts = []*batcherv1.ContentPart{{}}
		}), "request.chat.messages[0].parts[0]"},
		{"tool bad name", chat(func(r *batcherv1.Request) { r.Tools = []*batcherv1.Tool{{Name: "a b"}} }), "request.tools[0].name"},
		{"tool_choice names no tool", chat(func(r *batcherv1.Request) {
			r.Tools = []*batcherv1.Tool{{Name: "f"}}
			r.ToolChoice = &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Function{Function: "g"}}
		}), "request.tool_choice.function"},
		{"json_schema without a schema", chat(func(r *batcherv1.Request) {
			r.ResponseFormat = &batcherv1.ResponseFormat{Type: batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "s"}
		}), "request.response_format.schema"},
		{"too much metadata", chat(func(r *batcherv1.Request) {
			r.Metadata = map[string]string{}
			for i := range batcher.MaxMetadataEntries + 1 {
				r.Metadata[string(rune('a'+i%26))+strings.Repeat("k", i)] = "v"
			}
		}), "request.metadata"},
	}
}

func TestSubmitInvalid(t *testing.T) {
	e := newEnv(t, newFake())
	ctx := testCtx(t)
	for _, tt := range badRequests() {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: tt.req})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.field+": ") {
				t.Fatalf("Submit = %v %q, want INVALID_ARGUMENT naming %s", st.Code(), st.Message(), tt.field)
			}
		})
	}
	t.Run("no request", func(t *testing.T) {
		_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "request: must be set" {
			t.Fatalf("Submit = %v", st)
		}
	})
	if n := e.be.calls.Load(); n != 0 {
		t.Fatalf("the backend was called %d times for bad input", n)
	}
}

func TestSubmitUpstreamErrors(t *testing.T) {
	be := newFake()
	be.fail = func(r *batcher.Request) error {
		switch r.Metadata["fail"] {
		case "auth":
			return &batcher.UpstreamError{Class: batcher.ClassAuth, StatusCode: 401, Message: "key sk-SECRET rejected", Err: errors.New("sk-SECRET")}
		case "rate":
			return &batcher.UpstreamError{Class: batcher.ClassRateLimit, StatusCode: 429, Message: "slow down",
				RateLimit: &batcher.RateLimitInfo{RetryAfter: 3 * time.Second}}
		case "invalid":
			return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, StatusCode: 400, Message: "context too long"}
		case "weird":
			return errors.New("something internal at /srv/secret")
		}
		return nil
	}
	e := newEnv(t, be)
	ctx := testCtx(t)
	tests := []struct {
		fail  string
		code  codes.Code
		msg   string
		retry time.Duration
	}{
		{"auth", codes.Internal, "upstream rejected the backend's credentials", 0},
		{"invalid", codes.InvalidArgument, "upstream rejected the request: context too long", 0},
		{"weird", codes.Internal, "internal error", 0},
		// Last: the core pauses the backend for the Retry-After.
		{"rate", codes.ResourceExhausted, "upstream rate limit reached: slow down", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.fail, func(t *testing.T) {
			req := chatReq("", "x")
			req.Metadata = map[string]string{"fail": tt.fail}
			_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: req})
			st := status.Convert(err)
			if st.Code() != tt.code || st.Message() != tt.msg {
				t.Fatalf("Submit = %v %q, want %v %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
			if got := retryDelay(st); got != tt.retry {
				t.Fatalf("retry delay = %v, want %v", got, tt.retry)
			}
		})
	}
}

func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

func TestSubmitRequestTimeout(t *testing.T) {
	e := newEnv(t, heldFake())
	req := chatReq("slow", "x")
	req.Timeout = durationpb.New(20 * time.Millisecond)
	_, err := e.client.Submit(testCtx(t), &batcherv1.SubmitRequest{Request: req})
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || st.Message() != "request deadline exceeded" {
		t.Fatalf("Submit = %v", st)
	}
}

func TestSubmitCallerCancels(t *testing.T) {
	e := newEnv(t, heldFake())
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("c", "x")})
		errc <- err
	}()
	e.be.waitStarted(t, 1)
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("Submit = %v, want CANCELLED", err)
	}
	<-e.be.ctxDone // the core cancelled the upstream call: nobody awaits it
	if n := e.core.Pending(); n != 0 {
		t.Fatalf("core still has %d pending requests", n)
	}
}

func TestSubmitQueueFull(t *testing.T) {
	e := newEnv(t, heldFake(), withCore(batcher.WithQueueCapacity(1)))
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() {
		_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("first", "x")})
		errc <- err
	}()
	e.be.waitStarted(t, 1)
	_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("second", "x")})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || retryDelay(st) != QueueFullRetryDelay {
		t.Fatalf("Submit = %v %v, want RESOURCE_EXHAUSTED with RetryInfo %v", st.Code(), st.Message(), QueueFullRetryDelay)
	}
	e.be.Release()
	if err := <-errc; err != nil {
		t.Fatalf("held Submit: %v", err)
	}
}

// waitAdmissionClosed waits until the core refuses admission.
func waitAdmissionClosed(t *testing.T, core *batcher.Batcher) {
	t.Helper()
	select {
	case <-core.Closed():
	case <-testCtx(t).Done():
		t.Fatal("admission never closed")
	}
}

func TestSubmitDuringShutdown(t *testing.T) {
	e := newEnv(t, heldFake(), withCore(batcher.WithQueueCapacity(1)))
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() {
		_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("held", "x")})
		errc <- err
	}()
	e.be.waitStarted(t, 1)

	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(ctx) }()
	waitAdmissionClosed(t, e.core)

	_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("late", "x")})
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "server shutting down" {
		t.Fatalf("Submit during shutdown = %v", st)
	}
	hc, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health during shutdown = %v, %v", hc, err)
	}
	s, err := e.client.SubmitStream(ctx)
	if err != nil {
		t.Fatalf("SubmitStream: %v", err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream during shutdown: %v, want UNAVAILABLE", err)
	}

	e.be.Release()
	if err := <-errc; err != nil {
		t.Fatalf("the held request failed: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestShutdownDeadlineEndsPendingWithUnavailable(t *testing.T) {
	e := newEnv(t, heldFake())
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() {
		_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("held", "x")})
		errc <- err
	}()
	e.be.waitStarted(t, 1)
	sctx, cancel := context.WithCancel(ctx)
	cancel() // no time to drain
	if err := e.srv.Shutdown(sctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want an error wrapping context.Canceled", err)
	}
	err := <-errc
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "server shut down before the request completed" {
		t.Fatalf("pending request = %v", st)
	}
}

// TestEndToEnd serves over a real port and checks what grpcurl needs:
// health and reflection.
func TestEndToEnd(t *testing.T) {
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "fake", Backend: newFake()}),
		batcher.WithRoute(batcher.Route{Name: routeChat, Op: batcher.OpChat, Backend: "fake",
			Batch: batcher.BatchConfig{Window: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(core, WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(nil)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)

	for _, svc := range []string{"", "batcher.v1.BatcherService"} {
		hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, %v", svc, hc, err)
		}
	}

	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	lr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range lr.GetListServicesResponse().GetService() {
		names[s.GetName()] = true
	}
	if !names["batcher.v1.BatcherService"] || !names["grpc.health.v1.Health"] {
		t.Fatalf("reflection lists %v", names)
	}
	_ = rs.CloseSend()

	resp, err := batcherv1.NewBatcherServiceClient(conn).Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("", "tcp")})
	if err != nil || resp.GetCompletion().GetText() != "echo: tcp" {
		t.Fatalf("Submit = %v, %v", resp, err)
	}

	_ = conn.Close()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	gs.GracefulStop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// panicService is a stand-in service whose handlers panic, to check the
// recovery interceptors of NewGRPCServer.
var panicServiceDesc = grpc.ServiceDesc{
	ServiceName: "test.Panic",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Panic/Unary"}
			return icpt(ctx, in, info, func(context.Context, any) (any, error) { panic("secret detail") })
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Stream", ServerStreams: true,
		Handler: func(any, grpc.ServerStream) error { panic("secret detail") },
	}},
}

func TestRecoveryTurnsPanicsIntoInternal(t *testing.T) {
	def := slog.Default()
	slog.SetDefault(quietLog) // the recovery handler logs the panic there
	t.Cleanup(func() { slog.SetDefault(def) })
	gs := NewGRPCServer(nil)
	gs.RegisterService(&panicServiceDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx := testCtx(t)
	err = conn.Invoke(ctx, "/test.Panic/Unary", &emptypb.Empty{}, &emptypb.Empty{})
	if st := status.Convert(err); st.Code() != codes.Internal || strings.Contains(st.Message(), "secret") {
		t.Fatalf("unary panic = %v", st)
	}
	cs, err := conn.NewStream(ctx, &panicServiceDesc.Streams[0], "/test.Panic/Stream")
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.SendMsg(&emptypb.Empty{})
	_ = cs.CloseSend()
	err = cs.RecvMsg(&emptypb.Empty{})
	if st := status.Convert(err); st.Code() != codes.Internal || strings.Contains(st.Message(), "secret") {
		t.Fatalf("stream panic = %v", st)
	}
}

// barrierServiceDesc is a stand-in service whose unary handler returns only
// once n calls are in it at once.
func barrierServiceDesc(n int) *grpc.ServiceDesc {
	var mu sync.Mutex
	in := 0
	all := make(chan struct{})
	return &grpc.ServiceDesc{
		ServiceName: "test.Barrier",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Wait",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(new(emptypb.Empty)); err != nil {
					return nil, err
				}
				mu.Lock()
				if in++; in == n {
					close(all)
				}
				mu.Unlock()
				select {
				case <-all:
					return new(emptypb.Empty), nil
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			},
		}},
	}
}

// NewGRPCServer's worker pool is not a limit on the RPCs in flight: with
// every worker held by a waiting call, more calls still start.
func TestWorkerPoolIsNotALimit(t *testing.T) {
	n := int(streamWorkers()) + 8
	gs := NewGRPCServer(nil)
	gs.RegisterService(barrierServiceDesc(n), struct{}{})
	conn, stop := serveBuf(t, gs)
	defer stop()
	defer func() { _ = conn.Close() }()
	ctx := testCtx(t)
	errs := make(chan error, n)
	for range n {
		go func() { errs <- conn.Invoke(ctx, "/test.Barrier/Wait", &emptypb.Empty{}, &emptypb.Empty{}) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("%d calls against %d workers: %v", n, streamWorkers(), err)
		}
	}
}
