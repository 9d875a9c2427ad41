package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// wait returns h's result, failing the test if it does not resolve.
func wait(t *testing.T, h *client.Handle) (*batcherv1.Completion, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := h.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatalf("handle %s did not resolve", h.ID())
	}
	return c, err
}

func mustSend(t *testing.T, s *client.Stream, req *batcherv1.Request) *client.Handle {
	t.Helper()
	h, err := s.Send(t.Context(), req)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return h
}

func mustClose(t *testing.T, s *client.Stream) {
	t.Helper()
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func resolved(h *client.Handle) bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

func TestStreamSendWait(t *testing.T) {
	c := newClient(t, &fakeServer{})
	var sums []*batcherv1.StreamSummary
	s, err := c.Stream(t.Context(), client.OnSummary(func(s *batcherv1.StreamSummary) { sums = append(sums, s) }))
	if err != nil {
		t.Fatal(err)
	}
	h := mustSend(t, s, client.Complete("sim", "hi", client.WithMetadata("k", "v")))
	if h.ID() == "" {
		t.Fatal("Send assigned no id")
	}
	comp, err := wait(t, h)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if comp.GetId() != h.ID() || comp.GetText() != "echo: hi" || comp.GetMetadata()["k"] != "v" {
		t.Errorf("Wait = %v, want echo of the request %s", comp, h.ID())
	}
	mustClose(t, s)
	if len(sums) != 1 || !sums[0].GetFinal() || sums[0].GetCompleted() != 1 {
		t.Errorf("summaries %v, want one final with completed=1", sums)
	}
	if got := s.Summary(); got != sums[0] {
		t.Errorf("Summary() = %v, want the final one", got)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Send(t.Context(), client.Complete("sim", "late")); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := s.Flush(t.Context()); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
}

func TestStreamConcurrentSafe(t *testing.T) {
	c := newClient(t, &fakeServer{})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const senders, each = 8, 50
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for g := range senders {
		wg.Go(func() {
			handles := make([]*client.Handle, 0, each)
			for i := range each {
				h, err := s.Send(t.Context(), client.Chat("sim", client.User(fmt.Sprintf("%d/%d", g, i))))
				if err != nil {
					errs <- err
					return
				}
				handles = append(handles, h)
			}
			for i, h := range handles {
				comp, err := h.Wait(ctx)
				if want := fmt.Sprintf("echo: %d/%d", g, i); err != nil || comp.GetText() != want || comp.GetId() != h.ID() {
					errs <- fmt.Errorf("handle %s: %v, %w; want %q", h.ID(), comp, err, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mustClose(t, s)
	if sum := s.Summary(); !sum.GetFinal() || sum.GetCompleted() != senders*each || sum.GetSubmitted() != senders*each {
		t.Errorf("final summary %v, want %d submitted and completed", sum, senders*each)
	}
}

// Requests complete newest first; each handle still gets its own completion,
// and Flush reaches the server.
func TestStreamOutOfOrderAndFlush(t *testing.T) {
	c := newClient(t, &fakeServer{stream: (&protocol{hold: true}).serve})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var hs []*client.Handle
	for i := range 5 {
		hs = append(hs, mustSend(t, s, client.Complete("sim", fmt.Sprint(i))))
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// The server completes newest first: once the oldest is done, all are.
	if _, err := wait(t, hs[0]); err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if !resolved(h) {
			t.Errorf("handle %d not resolved after the oldest", i)
		}
		comp, err := wait(t, h)
		if err != nil || comp.GetText() != fmt.Sprint("echo: ", i) {
			t.Errorf("handle %d = %v, %v", i, comp, err)
		}
	}
	mustClose(t, s)
}

// Close half-closes and waits for the server to answer everything it holds.
func TestStreamCloseDrains(t *testing.T) {
	c := newClient(t, &fakeServer{stream: (&protocol{hold: true}).serve})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var hs []*client.Handle
	for i := range 20 {
		hs = append(hs, mustSend(t, s, client.Complete("sim", fmt.Sprint(i))))
	}
	for i, h := range hs {
		if resolved(h) {
			t.Fatalf("handle %d resolved before Close; the server holds every request until half-close", i)
		}
	}
	mustClose(t, s)
	for i, h := range hs {
		if !resolved(h) {
			t.Fatalf("handle %d unresolved after Close", i)
		}
		if comp, err := wait(t, h); err != nil || comp.GetText() != fmt.Sprint("echo: ", i) {
			t.Errorf("handle %d = %v, %v", i, comp, err)
		}
	}
	if sum := s.Summary(); !sum.GetFinal() || sum.GetCompleted() != 20 {
		t.Errorf("summary %v, want final with 20 completed", sum)
	}
}

func TestStreamRejectionAndFailure(t *testing.T) {
	p := &protocol{
		reject: func(r *batcherv1.Request) *spb.Status {
			switch r.GetModel() {
			case "unknown":
				return status.New(codes.InvalidArgument, "model: unknown route").Proto()
			case "blank":
				return &spb.Status{} // a careless server: OK status on a rejection
			}
			return nil
		},
		fail: func(r *batcherv1.Request) *spb.Status {
			if r.GetModel() == "flaky" {
				return status.New(codes.Unavailable, "upstream unavailable").Proto()
			}
			return nil
		},
	}
	var rejections []*batcherv1.Rejection
	c := newClient(t, &fakeServer{stream: p.serve})
	s, err := c.Stream(t.Context(), client.OnRejection(func(r *batcherv1.Rejection) { rejections = append(rejections, r) }))
	if err != nil {
		t.Fatal(err)
	}
	bad := mustSend(t, s, client.Complete("unknown", "x"))
	blank := mustSend(t, s, client.Complete("blank", "x"))
	flaky := mustSend(t, s, client.Complete("flaky", "x"))
	good := mustSend(t, s, client.Complete("sim", "x"))

	if comp, err := wait(t, bad); comp != nil || status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "model: unknown route") {
		t.Errorf("rejected: %v, %v; want no completion and INVALID_ARGUMENT naming the field", comp, err)
	}
	if comp, err := wait(t, blank); comp != nil || status.Code(err) != codes.Unknown {
		t.Errorf("rejected without status: %v, %v; want UNKNOWN", comp, err)
	}
	if comp, err := wait(t, flaky); comp.GetId() != flaky.ID() || status.Code(err) != codes.Unavailable {
		t.Errorf("failed: %v, %v; want the completion and UNAVAILABLE", comp, err)
	}
	if comp, err := wait(t, good); err != nil || comp.GetText() != "echo: x" {
		t.Errorf("good: %v, %v", comp, err)
	}
	// Cancelling a resolved handle sends nothing, so nothing is rejected.
	if err := good.Cancel(t.Context()); err != nil {
		t.Errorf("Cancel of a resolved handle: %v", err)
	}
	h := mustSend(t, s, client.Complete("sim", "y"))
	if _, err := wait(t, h); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if len(rejections) != 0 {
		t.Errorf("OnRejection got %v; every rejection answered a request", rejections)
	}
	if sum := s.Summary(); sum.GetRejected() != 2 || sum.GetFailed() != 1 || sum.GetCompleted() != 2 {
		t.Errorf("summary %v", sum)
	}
}

func TestStreamCancel(t *testing.T) {
	c := newClient(t, &fakeServer{stream: (&protocol{hold: true}).serve})
	var rejections []*batcherv1.Rejection
	s, err := c.Stream(t.Context(), client.OnRejection(func(r *batcherv1.Rejection) { rejections = append(rejections, r) }))
	if err != nil {
		t.Fatal(err)
	}
	keep := mustSend(t, s, client.Complete("sim", "keep"))
	drop := mustSend(t, s, client.Complete("sim", "drop"))
	if err := drop.Cancel(t.Context()); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	comp, err := wait(t, drop)
	if status.Code(err) != codes.Canceled || comp.GetId() != drop.ID() {
		t.Errorf("cancelled handle = %v, %v; want its completion and CANCELLED", comp, err)
	}
	if resolved(keep) {
		t.Error("cancelling one request resolved another")
	}
	mustClose(t, s)
	if comp, err := wait(t, keep); err != nil || comp.GetText() != "echo: keep" {
		t.Errorf("kept handle = %v, %v", comp, err)
	}
	if len(rejections) != 0 {
		t.Errorf("rejections %v", rejections)
	}
}

// A rejection that answers no request reaches OnRejection.
func TestStreamUnmatchedRejection(t *testing.T) {
	got := make(chan *batcherv1.Rejection, 1)
	srv := &fakeServer{stream: func(ss batcherv1.BatcherService_SubmitStreamServer) error {
		if _, err := ss.Recv(); err != nil {
			return err
		}
		return ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{
			Rejection: &batcherv1.Rejection{Error: status.New(codes.InvalidArgument, "flush: not now").Proto()},
		}})
	}}
	c := newClient(t, srv)
	s, err := c.Stream(t.Context(), client.WithVerbosity(batcherv1.Verbosity_VERBOSITY_ALL), client.OnRejection(func(r *batcherv1.Rejection) { got <- r }))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	select {
	case r := <-got:
		if status.Code(status.ErrorProto(r.GetError())) != codes.InvalidArgument {
			t.Errorf("rejection %v", r)
		}
	default:
		t.Error("OnRejection not called before Close returned")
	}
}

// The stream breaks mid-way: every pending handle resolves with the error.
func TestStreamBrokenResolvesAll(t *testing.T) {
	const n = 5
	srv := &fakeServer{stream: func(ss batcherv1.BatcherService_SubmitStreamServer) error {
		for range n + 1 { // options, then n requests
			if _, err := ss.Recv(); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "server shutting down")
	}}
	c := newClient(t, srv)
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var hs []*client.Handle
	for i := range n {
		hs = append(hs, mustSend(t, s, client.Complete("sim", fmt.Sprint(i))))
	}
	for i, h := range hs {
		comp, err := wait(t, h)
		if comp != nil || !errors.Is(err, client.ErrStreamBroken) || status.Code(err) != codes.Unavailable {
			t.Errorf("handle %d = %v, %v; want ErrStreamBroken with UNAVAILABLE", i, comp, err)
		}
	}
	err = s.Close(t.Context())
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Close = %v, want UNAVAILABLE", err)
	}
	if _, err := s.Send(t.Context(), client.Complete("sim", "late")); !errors.Is(err, client.ErrStreamBroken) {
		t.Errorf("Send on a broken stream: %v, want ErrStreamBroken", err)
	}
}

// A server that ends the stream with OK leaving requests unanswered breaks
// the contract: the handles resolve with INTERNAL, and so does Close.
func TestStreamEndedOKWithPending(t *testing.T) {
	srv := &fakeServer{stream: func(ss batcherv1.BatcherService_SubmitStreamServer) error {
		for {
			m, err := ss.Recv()
			if err != nil {
				return err
			}
			if m.GetRequest() != nil {
				return nil
			}
		}
	}}
	c := newClient(t, srv)
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	h := mustSend(t, s, client.Complete("sim", "x"))
	if _, err := wait(t, h); !errors.Is(err, client.ErrStreamBroken) || status.Code(err) != codes.Internal {
		t.Errorf("Wait = %v, want ErrStreamBroken with INTERNAL", err)
	}
	if err := s.Close(t.Context()); status.Code(err) != codes.Internal {
		t.Errorf("Close = %v, want INTERNAL", err)
	}
}

// Cancelling the stream's context breaks it; nothing hangs.
func TestStreamContextCancelled(t *testing.T) {
	c := newClient(t, &fakeServer{stream: (&protocol{hold: true}).serve})
	ctx, cancel := context.WithCancel(t.Context())
	s, err := c.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := mustSend(t, s, client.Complete("sim", "x"))
	cancel()
	if _, err := wait(t, h); !errors.Is(err, client.ErrStreamBroken) || status.Code(err) != codes.Canceled {
		t.Errorf("Wait = %v, want ErrStreamBroken with CANCELLED", err)
	}
	if err := s.Close(t.Context()); status.Code(err) != codes.Canceled {
		t.Errorf("Close = %v, want CANCELLED", err)
	}
}

// Close's context bounds the drain: when it ends, the stream is aborted and
// every handle resolves.
func TestStreamCloseContext(t *testing.T) {
	srv := &fakeServer{stream: func(ss batcherv1.BatcherService_SubmitStreamServer) error {
		<-ss.Context().Done() // never answers
		return ss.Context().Err()
	}}
	c := newClient(t, srv)
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	h := mustSend(t, s, client.Complete("sim", "x"))
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("giving up")
	cancel(stop)
	err = s.Close(ctx)
	if !errors.Is(err, stop) || status.Code(err) != codes.Canceled {
		t.Errorf("Close = %v, want CANCELLED wrapping the cause", err)
	}
	if _, err := wait(t, h); !errors.Is(err, client.ErrStreamBroken) || !errors.Is(err, stop) {
		t.Errorf("Wait = %v, want ErrStreamBroken wrapping the cause", err)
	}
}

// Every event of a request reaches the callback and the channel, in order,
// before its handle resolves.
func TestStreamEventsInOrder(t *testing.T) {
	c := newClient(t, &fakeServer{})
	var mu sync.Mutex
	seen := make(map[string][]string)
	kind := func(ev *batcherv1.Event) string {
		switch ev.GetKind().(type) {
		case *batcherv1.Event_Queued:
			return "queued"
		case *batcherv1.Event_Batched:
			return "batched"
		case *batcherv1.Event_Dispatched:
			return "dispatched"
		}
		return "other"
	}
	events := make(chan *batcherv1.Event, 8)
	s, err := c.Stream(t.Context(),
		client.OnEvent(func(ev *batcherv1.Event) {
			mu.Lock()
			seen[ev.GetId()] = append(seen[ev.GetId()], kind(ev))
			mu.Unlock()
		}),
		client.WithEvents(events))
	if err != nil {
		t.Fatal(err)
	}
	fromChan := make(map[string][]string)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for ev := range events { // closed when the stream ends
			fromChan[ev.GetId()] = append(fromChan[ev.GetId()], kind(ev))
		}
	}()
	want := []string{"queued", "batched", "dispatched"}
	var hs []*client.Handle
	for i := range 20 {
		hs = append(hs, mustSend(t, s, client.Complete("sim", fmt.Sprint(i))))
	}
	for _, h := range hs {
		if _, err := wait(t, h); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := strings.Join(seen[h.ID()], ",")
		mu.Unlock()
		if got != strings.Join(want, ",") {
			t.Errorf("events of %s when resolved: %s, want %v", h.ID(), got, want)
		}
	}
	mustClose(t, s)
	<-drained
	for _, h := range hs {
		if got := strings.Join(fromChan[h.ID()], ","); got != strings.Join(want, ",") {
			t.Errorf("channel events of %s: %s, want %v", h.ID(), got, want)
		}
	}
}

// streamRecorder serves SubmitStream by recording every message it reads
// and completing each request at once.
type streamRecorder struct {
	mu   sync.Mutex
	msgs []*batcherv1.SubmitStreamRequest
}

func (r *streamRecorder) serve(ss batcherv1.BatcherService_SubmitStreamServer) error {
	for {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.mu.Unlock()
		if req := m.GetRequest(); req != nil {
			if err := ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{
				Completion: &batcherv1.Completion{Id: req.GetId()},
			}}); err != nil {
				return err
			}
		}
	}
}

func (r *streamRecorder) messages() []*batcherv1.SubmitStreamRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs
}

func TestStreamOptions(t *testing.T) {
	tests := []struct {
		name         string
		opts         []client.StreamOption
		wantOptions  bool
		wantVerb     batcherv1.Verbosity
		wantInterval time.Duration
	}{
		{name: "no consumer asks for completions only", wantOptions: true, wantVerb: batcherv1.Verbosity_VERBOSITY_COMPLETIONS},
		{name: "an event consumer keeps the default", opts: []client.StreamOption{client.OnEvent(func(*batcherv1.Event) {})}},
		{
			name:        "explicit verbosity",
			opts:        []client.StreamOption{client.WithVerbosity(batcherv1.Verbosity_VERBOSITY_ALL)},
			wantOptions: true, wantVerb: batcherv1.Verbosity_VERBOSITY_ALL,
		},
		{
			name:        "interval",
			opts:        []client.StreamOption{client.OnEvent(func(*batcherv1.Event) {}), client.WithSummaryInterval(250 * time.Millisecond)},
			wantOptions: true, wantInterval: 250 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &streamRecorder{}
			c := newClient(t, &fakeServer{stream: rec.serve})
			s, err := c.Stream(t.Context(), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := wait(t, mustSend(t, s, client.Complete("sim", "x"))); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			msgs := rec.messages()
			o := msgs[0].GetOptions()
			if (o != nil) != tt.wantOptions {
				t.Fatalf("first message %v, want options: %v", msgs[0], tt.wantOptions)
			}
			if o.GetVerbosity() != tt.wantVerb || o.GetSummaryInterval().AsDuration() != tt.wantInterval {
				t.Errorf("options %v, want verbosity %v interval %v", o, tt.wantVerb, tt.wantInterval)
			}
		})
	}
}

func TestStreamInvalidOptions(t *testing.T) {
	c := newClient(t, &fakeServer{})
	tests := []struct {
		opt  client.StreamOption
		want string
	}{
		{client.WithSummaryInterval(time.Millisecond), "summary_interval"},
		{client.WithSummaryInterval(2 * time.Hour), "summary_interval"},
		{client.WithVerbosity(batcherv1.Verbosity(42)), "verbosity"},
	}
	for _, tt := range tests {
		events := make(chan *batcherv1.Event)
		_, err := c.Stream(t.Context(), tt.opt, client.WithEvents(events))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Stream = %v, want an error naming %s", err, tt.want)
		}
		if _, open := <-events; open {
			t.Error("events channel left open after Stream failed")
		}
	}
}

func TestStreamIDs(t *testing.T) {
	c := newClient(t, &fakeServer{stream: (&protocol{hold: true}).serve})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A template sent twice: Send copies it, so the ids differ and the
	// template is untouched.
	tmpl := client.Complete("sim", "x")
	h1, h2 := mustSend(t, s, tmpl), mustSend(t, s, tmpl)
	if h1.ID() == h2.ID() || tmpl.GetId() != "" {
		t.Errorf("ids %q %q, template id %q: want distinct ids and an untouched template", h1.ID(), h2.ID(), tmpl.GetId())
	}
	// A caller id that collides with one Send will assign next.
	mine := mustSend(t, s, client.Complete("sim", "mine", client.WithID("r3")))
	auto := mustSend(t, s, client.Complete("sim", "auto"))
	if auto.ID() == mine.ID() {
		t.Errorf("Send assigned %q, already in flight", auto.ID())
	}
	if _, err := s.Send(t.Context(), client.Complete("sim", "dup", client.WithID("r3"))); !errors.Is(err, client.ErrDuplicateID) {
		t.Errorf("duplicate id: %v, want ErrDuplicateID", err)
	}
	if _, err := s.Send(t.Context(), nil); err == nil {
		t.Error("Send(nil) succeeded")
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if comp, err := wait(t, mine); err != nil || comp.GetText() != "echo: mine" {
		t.Fatalf("mine = %v, %v", comp, err)
	}
	// Once resolved, the id is free again.
	again := mustSend(t, s, client.Complete("sim", "again", client.WithID("r3")))
	mustClose(t, s)
	if comp, err := wait(t, again); err != nil || comp.GetText() != "echo: again" {
		t.Errorf("reused id = %v, %v", comp, err)
	}
}

// Send carries the caller's trace context on the request.
func TestStreamTraceContext(t *testing.T) {
	rec := &streamRecorder{}
	c := newClient(t, &fakeServer{stream: rec.serve})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx := trace.ContextWithSpanContext(t.Context(), testSpan)
	mustSend(t, s, client.Complete("sim", "x", client.WithID("t")))
	mustSend(t, s, client.Complete("sim", "x"))
	traced, err := s.Send(ctx, client.Complete("sim", "y", client.WithID("traced")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, traced); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	want := "00-" + testSpan.TraceID().String() + "-" + testSpan.SpanID().String() + "-01"
	for _, m := range rec.messages() {
		r := m.GetRequest()
		if r == nil {
			continue
		}
		if tp := r.GetTraceparent(); (r.GetId() == "traced") != (tp == want) {
			t.Errorf("request %s traceparent %q", r.GetId(), tp)
		}
	}
}

// stalled is the state of a sender that may block in flow control.
type stalled struct {
	attempts atomic.Int64 // Send calls started
	sent     atomic.Int64 // Send calls returned successfully
	finished chan error   // the sender's outcome
}

// waitStalled waits until the sender has been inside the same Send call for
// 50 polls in a row, and fails if it finishes instead. Being blocked is the
// absence of an event, so this polls; a slow machine can only make it
// conclude early, which weakens the test but never fails it wrongly.
func (st *stalled) waitStalled(t *testing.T) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	still, last := 0, int64(-1)
	for still < 50 {
		select {
		case err := <-st.finished:
			t.Fatalf("sender finished (%v) after %d sends: Send never blocked though the server reads nothing", err, st.sent.Load())
		case <-tick.C:
		}
		n := st.sent.Load()
		if st.attempts.Load() > n && n == last {
			still++
		} else {
			still, last = 0, n
		}
	}
}

// outcome returns the sender's result, failing the test if it never ends.
func (st *stalled) outcome(t *testing.T) error {
	t.Helper()
	select {
	case err := <-st.finished:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("sender still blocked after %d sends", st.sent.Load())
		return nil
	}
}

// flowControlServer reads nothing until release is closed, then serves the
// stream normally.
func flowControlServer(release <-chan struct{}) *fakeServer {
	return &fakeServer{stream: func(ss batcherv1.BatcherService_SubmitStreamServer) error {
		select {
		case <-release:
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
		return (&protocol{}).serve(ss)
	}}
}

// Small fixed HTTP/2 windows (setting them turns off BDP estimation), so the
// server's transport accepts little before it pushes back.
var smallWindows = []grpc.ServerOption{grpc.InitialWindowSize(64 << 10), grpc.InitialConnWindowSize(64 << 10)}

const (
	flowPayload  = 16 << 10
	flowAttempts = 256 // 4 MiB: far more than the windows and buffers hold
)

// send starts a goroutine sending up to flowAttempts large requests.
func (st *stalled) send(ctx context.Context, s *client.Stream, handles chan<- *client.Handle) {
	st.finished = make(chan error, 1)
	big := strings.Repeat("x", flowPayload)
	go func() {
		defer close(handles)
		for range flowAttempts {
			st.attempts.Add(1)
			h, err := s.Send(ctx, client.Complete("sim", big))
			if err != nil {
				st.finished <- err
				return
			}
			st.sent.Add(1)
			handles <- h
		}
		st.finished <- nil
	}()
}

// A server that stops reading makes Send block; cancelling Send's context
// unblocks it, aborts the stream and resolves every handle.
func TestStreamFlowControlSendContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c := newClient(t, flowControlServer(release), smallWindows...)
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	handles := make(chan *client.Handle, flowAttempts)
	var st stalled
	st.send(ctx, s, handles)
	st.waitStalled(t)
	if n := st.sent.Load(); n*flowPayload > 1<<20 {
		t.Errorf("%d sends (%d KiB) went through before Send blocked; flow control should stop it far sooner", n, n*flowPayload>>10)
	}
	t.Logf("Send blocked after %d sends (%d KiB)", st.sent.Load(), st.sent.Load()*flowPayload>>10)
	cancel()
	if err := st.outcome(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("blocked Send returned %v after its context was cancelled, want context.Canceled", err)
	}
	for h := range handles {
		if _, err := wait(t, h); !errors.Is(err, client.ErrStreamBroken) {
			t.Errorf("handle %s = %v, want ErrStreamBroken", h.ID(), err)
		}
	}
	if err := s.Close(t.Context()); status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Errorf("Close = %v, want CANCELLED", err)
	}
}

// While one Send is blocked in flow control, another waiting for its turn
// gives up with its own context without harming the stream; once the server
// reads again, everything completes.
func TestStreamFlowControlWaitingTurn(t *testing.T) {
	release := make(chan struct{})
	c := newClient(t, flowControlServer(release), smallWindows...)
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	handles := make(chan *client.Handle, flowAttempts)
	var st stalled
	st.send(t.Context(), s, handles)
	st.waitStalled(t)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Send(ctx, client.Complete("sim", "impatient")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send waiting for its turn = %v, want context.Canceled", err)
	}
	close(release)
	if err := st.outcome(t); err != nil {
		t.Fatalf("sender: %v", err)
	}
	n := 0
	for h := range handles {
		if comp, err := wait(t, h); err != nil || len(comp.GetText()) != len("echo: ")+flowPayload {
			t.Fatalf("handle %s = %v", h.ID(), err)
		}
		n++
	}
	mustClose(t, s)
	if n != flowAttempts {
		t.Errorf("%d handles, want %d", n, flowAttempts)
	}
}
