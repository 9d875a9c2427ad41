package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestStreamThousand sends 1,000 requests on one stream: each gets exactly
// one completion, preceded by its progress events in order.
func TestStreamThousand(t *testing.T) {
	const n = 1000
	e := newEnv(t, newFake())
	s := e.openStream(t, testCtx(t))
	sendErr := make(chan error, 1)
	go func() {
		for i := range n {
			if err := s.Send(reqMsg(chatReq(fmt.Sprintf("r%d", i), "hi"))); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- s.CloseSend()
	}()
	msgs, err := s.drain()
	if err != nil {
		t.Fatalf("stream ended with %v", err)
	}
	if err := <-sendErr; err != nil {
		t.Fatalf("Send: %v", err)
	}
	ta := tallyOf(msgs)
	if len(ta.completions) != n || len(ta.dupDone) != 0 || len(ta.rejections) != 0 {
		t.Fatalf("%d completions (%d duplicated), %d rejections; want %d, 0, 0",
			len(ta.completions), len(ta.dupDone), len(ta.rejections), n)
	}
	// Per id: queued < batched < dispatched < completion, in stream order.
	pos := map[string][]string{}
	for _, m := range msgs {
		switch {
		case m.GetEvent() != nil:
			ev := m.GetEvent()
			var kind string
			switch {
			case ev.GetQueued() != nil:
				kind = "queued"
			case ev.GetBatched() != nil:
				kind = "batched"
			case ev.GetDispatched() != nil:
				kind = "dispatched"
			default:
				kind = "other"
			}
			pos[ev.GetId()] = append(pos[ev.GetId()], kind)
		case m.GetCompletion() != nil:
			pos[m.GetCompletion().GetId()] = append(pos[m.GetCompletion().GetId()], "done")
		}
	}
	want := "queued batched dispatched done"
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		if got := strings.Join(pos[id], " "); got != want {
			t.Fatalf("%s: messages %q, want %q", id, got, want)
		}
		c := ta.completions[id]
		if c.GetError() != nil || c.GetText() != "echo: hi" {
			t.Fatalf("%s: completion %v", id, c)
		}
	}
	f := ta.final
	if ta.finals != 1 || f.GetSubmitted() != n || f.GetCompleted() != n || f.GetInFlight() != 0 ||
		f.GetFailed() != 0 || f.GetRejected() != 0 {
		t.Fatalf("final summary (%d of them) = %v", ta.finals, f)
	}
	if last := msgs[len(msgs)-1]; !last.GetSummary().GetFinal() {
		t.Fatalf("last message is %v, want the final summary", last)
	}
}

func TestStreamVerbosityCompletions(t *testing.T) {
	e := newEnv(t, newFake())
	s := e.openStream(t, testCtx(t))
	s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	for i := range 5 {
		s.send(reqMsg(chatReq(fmt.Sprint(i), "x")))
	}
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	if len(ta.events) != 0 || len(ta.completions) != 5 || ta.finals != 1 {
		t.Fatalf("%d ids with events, %d completions, %d final summaries; want 0, 5, 1",
			len(ta.events), len(ta.completions), ta.finals)
	}
}

func TestStreamSummaryInterval(t *testing.T) {
	e := newEnv(t, heldFake())
	s := e.openStream(t, testCtx(t))
	s.send(optionsMsg(&batcherv1.StreamOptions{SummaryInterval: durationpb.New(MinSummaryInterval)}))
	s.send(reqMsg(chatReq("a", "x")))
	e.be.waitStarted(t, 1)
	// Two periodic summaries while the request is held.
	var sums []*batcherv1.StreamSummary
	for len(sums) < 2 {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if sum := m.GetSummary(); sum != nil {
			sums = append(sums, sum)
		}
	}
	for _, sum := range sums {
		if sum.GetFinal() || sum.GetSubmitted() != 1 || sum.GetInFlight() != 1 || sum.GetTime() == nil {
			t.Fatalf("summary %v", sum)
		}
	}
	if d := sums[1].GetTime().AsTime().Sub(sums[0].GetTime().AsTime()); d < MinSummaryInterval/2 {
		t.Fatalf("summaries %v apart, want about %v", d, MinSummaryInterval)
	}
	e.be.Release()
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	if f := tallyOf(msgs).final; f.GetCompleted() != 1 || f.GetInFlight() != 0 {
		t.Fatalf("final %v", f)
	}
}

// TestStreamFirstMessage: a first message that is neither options nor a
// request, or bad options, ends the stream with INVALID_ARGUMENT.
func TestStreamFirstMessage(t *testing.T) {
	e := newEnv(t, newFake())
	tests := []struct {
		name string
		msg  *batcherv1.SubmitStreamRequest
		want string
	}{
		{"cancel", cancelMsg("x"), "first message: must be options or a request"},
		{"flush", flushMsg, "first message: must be options or a request"},
		{"empty", &batcherv1.SubmitStreamRequest{}, "first message: must be options or a request"},
		{"interval too short", optionsMsg(&batcherv1.StreamOptions{SummaryInterval: durationpb.New(10 * time.Millisecond)}),
			"options.summary_interval: must be 100ms to 1h0m0s, got 10ms"},
		{"interval too long", optionsMsg(&batcherv1.StreamOptions{SummaryInterval: durationpb.New(2 * time.Hour)}),
			"options.summary_interval: must be 100ms to 1h0m0s, got 2h0m0s"},
		{"interval invalid", optionsMsg(&batcherv1.StreamOptions{SummaryInterval: &durationpb.Duration{Seconds: -1, Nanos: 5}}),
			"options.summary_interval: invalid duration"},
		{"unknown verbosity", optionsMsg(&batcherv1.StreamOptions{Verbosity: 7}), "options.verbosity: unknown value 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := e.openStream(t, testCtx(t))
			s.send(tt.msg)
			msgs, err := s.drain()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || st.Message() != tt.want {
				t.Fatalf("stream ended with %v %q, want INVALID_ARGUMENT %q", st.Code(), st.Message(), tt.want)
			}
			if len(msgs) != 0 {
				t.Fatalf("got %d messages before the error: %v", len(msgs), msgs)
			}
		})
	}
}

// TestStreamRejections: each bad request gets a Rejection naming the field,
// and the stream goes on.
func TestStreamRejections(t *testing.T) {
	e := newEnv(t, heldFake())
	s := e.openStream(t, testCtx(t))
	s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	s.send(reqMsg(chatReq("held", "x"))) // stays in flight
	e.be.waitStarted(t, 1)

	for _, tt := range badRequests() {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Id = "bad-" + tt.name
			if tt.field == "request.id" { // a too-long id
				tt.req.Id = strings.Repeat("i", batcher.MaxIDBytes+1)
			}
			s.send(reqMsg(tt.req))
			m := s.next()
			r := m.GetRejection()
			st := status.FromProto(r.GetError())
			if r == nil || r.GetId() != tt.req.Id || st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.field+": ") {
				t.Fatalf("got %v, want a rejection of %q naming %s", m, tt.req.Id, tt.field)
			}
		})
	}
	others := []struct {
		name   string
		msg    *batcherv1.SubmitStreamRequest
		id     string
		code   codes.Code
		prefix string
	}{
		{"duplicate id", reqMsg(chatReq("held", "again")), "held", codes.InvalidArgument, "request.id: duplicate"},
		{"empty id", reqMsg(chatReq("", "x")), "", codes.InvalidArgument, "request.id: must be set"},
		// An unset request arrives as an empty one.
		{"empty request", &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{}}, "", codes.InvalidArgument, "request.id: must be set"},
		{"late options", optionsMsg(&batcherv1.StreamOptions{}), "", codes.InvalidArgument, "options: allowed only as the first message"},
		{"no kind", &batcherv1.SubmitStreamRequest{}, "", codes.InvalidArgument, "kind: must be one of"},
		{"cancel unknown", cancelMsg("nope"), "", codes.NotFound, "cancel: no request \"nope\""},
	}
	for _, tt := range others {
		t.Run(tt.name, func(t *testing.T) {
			s.send(tt.msg)
			m := s.next()
			r := m.GetRejection()
			st := status.FromProto(r.GetError())
			if r == nil || r.GetId() != tt.id || st.Code() != tt.code || !strings.HasPrefix(st.Message(), tt.prefix) {
				t.Fatalf("got %v, want a rejection of %q: %v %q...", m, tt.id, tt.code, tt.prefix)
			}
		})
	}

	e.be.Release()
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatalf("stream ended with %v", err)
	}
	ta := tallyOf(msgs)
	if c := ta.completions["held"]; c == nil || c.GetText() != "echo: x" {
		t.Fatalf("held request: %v", c)
	}
	wantRejected := int64(len(badRequests()) + len(others))
	if f := ta.final; f.GetSubmitted() != 1 || f.GetCompleted() != 1 || f.GetRejected() != wantRejected {
		t.Fatalf("final summary %v, want 1 submitted, 1 completed, %d rejected", f, wantRejected)
	}
	if n := e.be.requests.Load(); n != 1 {
		t.Fatalf("backend saw %d requests, want 1", n)
	}
}

func TestStreamUpstreamFailure(t *testing.T) {
	be := newFake()
	be.fail = func(r *batcher.Request) error {
		if r.ID == "bad" {
			return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, StatusCode: 400, Message: "too long"}
		}
		return nil
	}
	e := newEnv(t, be, withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MaxBatchSize: 2, MinBatchSize: 2}))
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(chatReq("good", "x")))
	s.send(reqMsg(chatReq("bad", "x")))
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	good, bad := ta.completions["good"], ta.completions["bad"]
	if good.GetText() != "echo: x" || good.GetBatchSize() != 2 {
		t.Fatalf("good: %v", good)
	}
	if bad.GetOutput() != nil || bad.GetError().GetCode() != int32(codes.InvalidArgument) ||
		bad.GetError().GetMessage() != "upstream rejected the request: too long" || bad.GetBatchId() != good.GetBatchId() {
		t.Fatalf("bad: %v", bad)
	}
	if f := ta.final; f.GetCompleted() != 1 || f.GetFailed() != 1 {
		t.Fatalf("final %v", f)
	}
}

func TestStreamQueueFull(t *testing.T) {
	e := newEnv(t, heldFake(), withCore(batcher.WithQueueCapacity(2)))
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(chatReq("a", "x")))
	s.send(reqMsg(chatReq("b", "x")))
	s.send(reqMsg(chatReq("c", "x")))
	m := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetRejection() != nil })
	st := status.FromProto(m.GetRejection().GetError())
	if m.GetRejection().GetId() != "c" || st.Code() != codes.ResourceExhausted || retryDelay(st) != QueueFullRetryDelay {
		t.Fatalf("rejection %v, want c RESOURCE_EXHAUSTED with RetryInfo", m)
	}
	e.be.Release()
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	if ta.completions["a"] == nil || ta.completions["b"] == nil || ta.completions["c"] != nil {
		t.Fatalf("completions %v", ta.completions)
	}
}

func TestStreamCancel(t *testing.T) {
	e := newEnv(t, heldFake(), withConcurrency(1))
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(chatReq("a", "x")))
	e.be.waitStarted(t, 1) // a is dispatched and held
	s.send(reqMsg(chatReq("b", "x")))
	s.until(func(m *batcherv1.SubmitStreamResponse) bool {
		return m.GetEvent().GetQueued() != nil && m.GetEvent().GetId() == "b"
	})

	// Cancel one queued and one dispatched request.
	s.send(cancelMsg("b"))
	m := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetCompletion() != nil })
	if c := m.GetCompletion(); c.GetId() != "b" || c.GetError().GetCode() != int32(codes.Canceled) {
		t.Fatalf("got %v, want b CANCELLED", c)
	}
	s.send(cancelMsg("a"))
	m = s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetCompletion() != nil })
	if c := m.GetCompletion(); c.GetId() != "a" || c.GetError().GetCode() != int32(codes.Canceled) {
		t.Fatalf("got %v, want a CANCELLED", c)
	}
	<-e.be.ctxDone // a's upstream call was cancelled too

	// The id is free again once terminal.
	e.be.Release()
	s.send(reqMsg(chatReq("a", "again")))
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	if c := ta.completions["a"]; c.GetText() != "echo: again" {
		t.Fatalf("reused id: %v", c)
	}
	if f := ta.final; f.GetSubmitted() != 3 || f.GetCompleted() != 1 || f.GetFailed() != 2 {
		t.Fatalf("final %v", f)
	}
}

func TestStreamFlush(t *testing.T) {
	e := newEnv(t, newFake(), withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MinBatchSize: 5, MaxBatchSize: 10}))
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(chatReq("a", "x")))
	s.send(reqMsg(chatReq("b", "x")))
	s.send(flushMsg)
	for _, want := range []string{"a", "b"} {
		m := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetCompletion() != nil })
		if c := m.GetCompletion(); c.GetId() != want || c.GetBatchSize() != 2 {
			t.Fatalf("got %v, want %s in a batch of 2", c, want)
		}
	}
	_ = s.CloseSend()
	if _, err := s.drain(); err != nil {
		t.Fatal(err)
	}
}

// TestStreamShutdown: every accepted request gets its terminal result, then
// the final summary, then UNAVAILABLE.
func TestStreamShutdown(t *testing.T) {
	e := newEnv(t, heldFake(), withConcurrency(1), withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MaxBatchSize: 2}))
	ctx := testCtx(t)
	s := e.openStream(t, ctx)
	for i := range 5 {
		s.send(reqMsg(chatReq(fmt.Sprint(i), "x")))
	}
	e.be.waitStarted(t, 2) // one batch dispatched and held, three queued
	for q := 0; q < 5; {
		if s.next().GetEvent().GetQueued() != nil {
			q++
		}
	}
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(ctx) }()
	e.be.Release()
	msgs, err := s.drain()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || st.Message() != "server shutting down" {
		t.Fatalf("stream ended with %v, want UNAVAILABLE", st)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	ta := tallyOf(msgs)
	for i := range 5 {
		if c := ta.completions[fmt.Sprint(i)]; c.GetText() != "echo: x" {
			t.Fatalf("request %d: %v", i, c)
		}
	}
	if len(ta.dupDone) != 0 || ta.finals != 1 || ta.final.GetCompleted() != 5 || !msgs[len(msgs)-1].GetSummary().GetFinal() {
		t.Fatalf("duplicates %v, final summaries %d, final %v", ta.dupDone, ta.finals, ta.final)
	}
}

// TestStreamShutdownHalfClosed: a caller that already half-closed gets OK.
func TestStreamShutdownHalfClosed(t *testing.T) {
	e := newEnv(t, heldFake())
	halfClosed := make(chan struct{})
	e.srv.testHookRecvDone = func() { close(halfClosed) }
	ctx := testCtx(t)
	s := e.openStream(t, ctx)
	s.send(reqMsg(chatReq("a", "x")))
	e.be.waitStarted(t, 1)
	_ = s.CloseSend()
	<-halfClosed // the server has seen it
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(ctx) }()
	e.be.Release()
	msgs, err := s.drain()
	if err != nil {
		t.Fatalf("stream ended with %v, want OK", err)
	}
	if c := tallyOf(msgs).completions["a"]; c.GetText() != "echo: x" {
		t.Fatalf("a: %v", c)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// TestStreamShutdownDeadline: requests still pending when the drain
// deadline passes get UNAVAILABLE completions; the stream still ends.
func TestStreamShutdownDeadline(t *testing.T) {
	e := newEnv(t, heldFake())
	ctx := testCtx(t)
	s := e.openStream(t, ctx)
	s.send(reqMsg(chatReq("a", "x")))
	s.send(reqMsg(chatReq("b", "x")))
	e.be.waitStarted(t, 2)
	sctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.srv.Shutdown(sctx); err == nil {
		t.Fatal("Shutdown with an ended context returned nil")
	}
	msgs, err := s.drain()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stream ended with %v", err)
	}
	ta := tallyOf(msgs)
	for _, id := range []string{"a", "b"} {
		if c := ta.completions[id]; c.GetError().GetCode() != int32(codes.Unavailable) {
			t.Fatalf("%s: %v", id, c)
		}
	}
}

// TestStreamWindow: with the backend held, the server reads no more than
// the window's worth of requests; the rest wait in flow control and all
// complete after release.
func TestStreamWindow(t *testing.T) {
	const window, n = 4, 10
	e := newEnv(t, heldFake(),
		withServer(WithStreamWindow(window), WithSummaryInterval(MinSummaryInterval)),
		withConcurrency(2*n),
		withBatch(batcher.BatchConfig{Window: time.Millisecond, MaxBatchSize: 1}))
	s := e.openStream(t, testCtx(t))
	s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	for i := range n {
		s.send(reqMsg(chatReq(fmt.Sprint(i), "x"))) // gRPC buffers these
	}
	e.be.waitStarted(t, window)
	// Two summary intervals pass with the window full and nothing more read.
	for seen := 0; seen < 2; {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sum := m.GetSummary()
		if sum == nil {
			t.Fatalf("unexpected %v while held", m)
		}
		if sum.GetSubmitted() > window {
			t.Fatalf("summary %v: more than the window of %d read", sum, window)
		}
		if sum.GetSubmitted() < window && seen == 0 {
			continue // built before the window filled; it may still be queued
		}
		if sum.GetSubmitted() != window || sum.GetInFlight() != window {
			t.Fatalf("summary %v, want %d submitted and in flight", sum, window)
		}
		seen++
	}
	if p := e.core.Pending(); p != window {
		t.Fatalf("core has %d pending, want %d", p, window)
	}
	e.be.Release()
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	if len(ta.completions) != n || len(ta.rejections) != 0 {
		t.Fatalf("%d completions, %d rejections; want %d, 0", len(ta.completions), len(ta.rejections), n)
	}
	if m := e.be.maxInside.Load(); m > window {
		t.Fatalf("%d requests were in the backend at once, window %d", m, window)
	}
}

// TestStreamCallerGoesAway: when the caller cancels the stream, everything it
// had in flight is cancelled in the core.
func TestStreamCallerGoesAway(t *testing.T) {
	e := newEnv(t, heldFake(), withBatch(batcher.BatchConfig{Window: time.Millisecond, MaxBatchSize: 1}))
	ctx, cancel := context.WithCancel(testCtx(t))
	s := e.openStream(t, ctx)
	for i := range 3 {
		s.send(reqMsg(chatReq(fmt.Sprint(i), "x")))
	}
	e.be.waitStarted(t, 3)
	cancel()
	for range 3 {
		<-e.be.ctxDone // each upstream call was cancelled: nobody awaits it
	}
	// The backend stays held, so the core drains only if the server
	// cancelled every request.
	sctx, stop := context.WithTimeout(testCtx(t), 5*time.Second)
	defer stop()
	if err := e.core.Shutdown(sctx); err != nil {
		t.Fatalf("core did not drain after the caller left (%d pending): %v", e.core.Pending(), err)
	}
}

// TestStreamRetryingEvent: a retried request reports Retrying between its
// attempts, and its completion counts both attempts.
func TestStreamRetryingEvent(t *testing.T) {
	be := newFake()
	var failed atomic.Bool
	be.fail = func(r *batcher.Request) error {
		if failed.CompareAndSwap(false, true) {
			return &batcher.UpstreamError{Class: batcher.ClassServer, StatusCode: 503, Message: "overloaded", Err: errors.New("sk-SECRET")}
		}
		return nil
	}
	e := newEnv(t, be, withRetryPolicy(batcher.RetryPolicy{MaxRetries: 1, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(chatReq("r", "x")))
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range msgs {
		ev := m.GetEvent()
		switch {
		case ev.GetQueued() != nil:
			kinds = append(kinds, "queued")
		case ev.GetBatched() != nil:
			kinds = append(kinds, "batched")
		case ev.GetDispatched() != nil:
			kinds = append(kinds, fmt.Sprintf("dispatched#%d", ev.GetDispatched().GetAttempt()))
		case ev.GetRetrying() != nil:
			rt := ev.GetRetrying()
			if rt.GetReason() != "server_error" || rt.GetMessage() != "upstream server error: overloaded" || rt.GetAttempt() != 1 {
				t.Errorf("retrying %v", rt)
			}
			kinds = append(kinds, "retrying")
		case m.GetCompletion() != nil:
			kinds = append(kinds, "done")
			if c := m.GetCompletion(); c.GetAttempts() != 2 || c.GetText() != "echo: x" {
				t.Errorf("completion %v", c)
			}
		}
	}
	if got, want := strings.Join(kinds, " "), "queued batched dispatched#1 retrying batched dispatched#2 done"; got != want {
		t.Fatalf("messages %q, want %q", got, want)
	}
}
