package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// fakeBackend answers every request at once unless told otherwise.
//
// Hooks are set before the env is built and never changed: hold makes
// every Dispatch wait until Release (or its context ends); fail injects a
// per-request error.
type fakeBackend struct {
	hold bool
	fail func(r *batcher.Request) error

	release     chan struct{}
	releaseOnce sync.Once
	started     chan []string // the request ids of each Dispatch, as it starts
	ctxDone     chan struct{} // one send per held Dispatch whose context ended

	calls     atomic.Int64
	requests  atomic.Int64
	inside    atomic.Int64 // requests inside Dispatch now
	maxInside atomic.Int64
}

func newFake() *fakeBackend {
	return &fakeBackend{
		release: make(chan struct{}),
		started: make(chan []string, 4096),
		ctxDone: make(chan struct{}, 4096),
	}
}

func heldFake() *fakeBackend {
	f := newFake()
	f.hold = true
	return f
}

// Release lets every held Dispatch, present and future, go on.
func (f *fakeBackend) Release() { f.releaseOnce.Do(func() { close(f.release) }) }

func (f *fakeBackend) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	n := int64(len(b.Requests))
	f.calls.Add(1)
	f.requests.Add(n)
	in := f.inside.Add(n)
	defer f.inside.Add(-n)
	for {
		m := f.maxInside.Load()
		if in <= m || f.maxInside.CompareAndSwap(m, in) {
			break
		}
	}
	ids := make([]string, len(b.Requests))
	for i, r := range b.Requests {
		ids[i] = r.ID
	}
	select {
	case f.started <- ids:
	default: // only benchmarks make more calls than it holds
	}
	if f.hold {
		select {
		case <-f.release:
		case <-ctx.Done():
			f.ctxDone <- struct{}{}
			return ctx.Err()
		}
	}
	for i, r := range b.Requests {
		if f.fail != nil {
			if err := f.fail(r); err != nil {
				out[i].Err = err
				continue
			}
		}
		switch r.Input.Op {
		case batcher.OpChat:
			msgs := r.Input.Messages
			out[i].Text = "echo: " + msgs[len(msgs)-1].Content
		case batcher.OpCompletion:
			out[i].Text = r.Input.Prompt + "..."
		case batcher.OpEmbedding:
			out[i].Embedding = []float32{float32(len(r.Input.Text)), 1}
		}
		out[i].FinishReason = batcher.FinishStop
		out[i].Usage = batcher.Usage{PromptTokens: int32(r.Input.Size()), CompletionTokens: 3}
	}
	return nil
}

// waitStarted waits for n requests to be inside Dispatch calls that started.
func (f *fakeBackend) waitStarted(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for len(ids) < n {
		select {
		case got := <-f.started:
			ids = append(ids, got...)
		case <-timeout.C:
			t.Fatalf("only %d of %d requests reached the backend", len(ids), n)
		}
	}
	return ids
}

// The test routes.
const (
	routeChat     = "chat"
	routeComplete = "complete"
	routeEmbed    = "embed"

	testMaxInputBytes  = 1024
	testMaxTokensLimit = 1000
)

type envConfig struct {
	batch      batcher.BatchConfig
	retry      batcher.RetryPolicy
	concurrent int
	coreOpts   []batcher.Option
	srvOpts    []Option
	tp         trace.TracerProvider
}

type envOption func(*envConfig)

func withBatch(bc batcher.BatchConfig) envOption { return func(c *envConfig) { c.batch = bc } }
func withCore(o ...batcher.Option) envOption {
	return func(c *envConfig) { c.coreOpts = append(c.coreOpts, o...) }
}
func withServer(o ...Option) envOption {
	return func(c *envConfig) { c.srvOpts = append(c.srvOpts, o...) }
}
func withTracing(tp trace.TracerProvider) envOption {
	return func(c *envConfig) { c.tp = tp }
}
func withRetryPolicy(p batcher.RetryPolicy) envOption { return func(c *envConfig) { c.retry = p } }
func withConcurrency(n int) envOption                 { return func(c *envConfig) { c.concurrent = n } }

// env is a real core with a fake backend behind a Server, served over an
// in-memory listener.
type env struct {
	be     *fakeBackend
	core   *batcher.Batcher
	srv    *Server
	gs     *grpc.Server
	conn   *grpc.ClientConn
	client batcherv1.BatcherServiceClient
}

var quietLog = slog.New(slog.DiscardHandler)

// serveBuf serves gs on an in-memory listener and dials it. stop stops gs
// and waits for Serve to return. The caller closes conn and calls stop in
// its cleanup, in the order its server's shutdown wants.
func serveBuf(t testing.TB, gs *grpc.Server) (conn *grpc.ClientConn, stop func()) {
	t.Helper()
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
		gs.Stop()
		t.Fatal(err)
	}
	return conn, func() {
		gs.Stop()
		<-served
	}
}

// newEnv builds an env and registers its teardown with t.Cleanup.
func newEnv(t testing.TB, be *fakeBackend, opts ...envOption) *env {
	t.Helper()
	cfg := envConfig{
		batch: batcher.BatchConfig{Window: time.Millisecond},
		// No retries unless a test asks: failures are final and fast.
		retry: batcher.RetryPolicy{MaxRetries: -1},
	}
	for _, o := range opts {
		o(&cfg)
	}
	coreOpts := []batcher.Option{
		batcher.WithBackend(batcher.BackendConfig{Name: "fake", Backend: be, MaxConcurrency: cfg.concurrent,
			Retry: cfg.retry,
			// Injected failures must not open the breaker under later tests.
			Breaker: batcher.BreakerConfig{Consecutive: -1, MinCalls: math.MaxInt32}}),
		batcher.WithRoute(batcher.Route{Name: routeChat, Op: batcher.OpChat, Backend: "fake", Batch: cfg.batch,
			MaxInputBytes: testMaxInputBytes, MaxTokensLimit: testMaxTokensLimit}),
		batcher.WithRoute(batcher.Route{Name: routeComplete, Op: batcher.OpCompletion, Backend: "fake", Batch: cfg.batch}),
		batcher.WithRoute(batcher.Route{Name: routeEmbed, Op: batcher.OpEmbedding, Backend: "fake", Batch: cfg.batch}),
	}
	if cfg.tp != nil {
		coreOpts = append(coreOpts, batcher.WithTracerProvider(cfg.tp))
	}
	core, err := batcher.New(append(coreOpts, cfg.coreOpts...)...)
	if err != nil {
		t.Fatalf("batcher.New: %v", err)
	}
	srv, err := New(core, append([]Option{WithLogger(quietLog)}, cfg.srvOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(cfg.tp)
	srv.Register(gs)
	conn, stop := serveBuf(t, gs)
	t.Cleanup(func() {
		_ = conn.Close()
		be.Release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		stop()
	})
	return &env{be: be, core: core, srv: srv, gs: gs, conn: conn, client: batcherv1.NewBatcherServiceClient(conn)}
}

// ctx returns a context that bounds one test's RPCs.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func chatReq(id, text string) *batcherv1.Request {
	return &batcherv1.Request{
		Id:    id,
		Model: routeChat,
		Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{
			Messages: []*batcherv1.ChatMessage{{Role: "user", Content: text}},
		}},
	}
}

func reqMsg(r *batcherv1.Request) *batcherv1.SubmitStreamRequest {
	return &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: r}}
}

func cancelMsg(id string) *batcherv1.SubmitStreamRequest {
	return &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Cancel{Cancel: &batcherv1.Cancel{Id: id}}}
}

func optionsMsg(o *batcherv1.StreamOptions) *batcherv1.SubmitStreamRequest {
	return &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Options{Options: o}}
}

var flushMsg = &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Flush{Flush: &batcherv1.Flush{}}}

// streamClient is the client side of a SubmitStream with typed waits.
type streamClient struct {
	t testing.TB
	batcherv1.BatcherService_SubmitStreamClient
}

func (e *env) openStream(t testing.TB, ctx context.Context) *streamClient {
	t.Helper()
	s, err := e.client.SubmitStream(ctx)
	if err != nil {
		t.Fatalf("SubmitStream: %v", err)
	}
	return &streamClient{t: t, BatcherService_SubmitStreamClient: s}
}

func (s *streamClient) send(m *batcherv1.SubmitStreamRequest) {
	s.t.Helper()
	if err := s.Send(m); err != nil {
		s.t.Fatalf("Send: %v", err)
	}
}

// next returns the next message other than a periodic summary.
func (s *streamClient) next() *batcherv1.SubmitStreamResponse {
	s.t.Helper()
	for {
		m, err := s.Recv()
		if err != nil {
			s.t.Fatalf("Recv: %v", err)
		}
		if sum := m.GetSummary(); sum != nil && !sum.GetFinal() {
			continue
		}
		return m
	}
}

// until returns the first message other than a periodic summary for which
// ok holds, failing on stream end.
func (s *streamClient) until(ok func(*batcherv1.SubmitStreamResponse) bool) *batcherv1.SubmitStreamResponse {
	s.t.Helper()
	for {
		if m := s.next(); ok(m) {
			return m
		}
	}
}

// drain reads to the end of the stream and returns every message and the
// stream's status (nil for OK).
func (s *streamClient) drain() ([]*batcherv1.SubmitStreamResponse, error) {
	var msgs []*batcherv1.SubmitStreamResponse
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
	}
}

// tally sorts a stream's messages.
type tally struct {
	completions map[string]*batcherv1.Completion
	rejections  map[string][]*batcherv1.Rejection
	events      map[string][]*batcherv1.Event
	final       *batcherv1.StreamSummary
	finals      int
	dupDone     []string // ids with more than one completion
}

func tallyOf(msgs []*batcherv1.SubmitStreamResponse) *tally {
	ta := &tally{
		completions: make(map[string]*batcherv1.Completion),
		rejections:  make(map[string][]*batcherv1.Rejection),
		events:      make(map[string][]*batcherv1.Event),
	}
	for _, m := range msgs {
		switch {
		case m.GetCompletion() != nil:
			c := m.GetCompletion()
			if _, dup := ta.completions[c.GetId()]; dup {
				ta.dupDone = append(ta.dupDone, c.GetId())
			}
			ta.completions[c.GetId()] = c
		case m.GetRejection() != nil:
			r := m.GetRejection()
			ta.rejections[r.GetId()] = append(ta.rejections[r.GetId()], r)
		case m.GetEvent() != nil:
			ev := m.GetEvent()
			ta.events[ev.GetId()] = append(ta.events[ev.GetId()], ev)
		case m.GetSummary().GetFinal():
			ta.final = m.GetSummary()
			ta.finals++
		}
	}
	return ta
}
