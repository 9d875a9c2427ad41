package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
)

// streamFake streams the words of "echo: <last message>" one delta each.
// After the first delta of each call it waits for gate (or ctx's end); it
// fails after failAfter deltas when failAfter is positive.
type streamFake struct {
	gate      chan struct{}
	failAfter int

	firstCh chan struct{} // one send per call's first delta
	ended   chan error    // ctx.Err() as each Stream returns
}

func newStreamFake() *streamFake {
	g := make(chan struct{})
	close(g)
	return &streamFake{gate: g, firstCh: make(chan struct{}, 4096), ended: make(chan error, 4096)}
}

func (f *streamFake) Dispatch(context.Context, *batcher.Batch, []batcher.Response) error {
	return errors.New("streamFake: only streams")
}

func (f *streamFake) Stream(ctx context.Context, b *batcher.Batch, w batcher.DeltaWriter) (resp batcher.Response, err error) {
	defer func() { f.ended <- ctx.Err() }()
	msgs := b.Requests[0].Input.Messages
	words := strings.SplitAfter("echo: "+msgs[len(msgs)-1].Content, " ")
	for i, word := range words {
		if f.failAfter > 0 && i == f.failAfter {
			return resp, &batcher.UpstreamError{Class: batcher.ClassNetwork, Message: "connection cut mid-stream"}
		}
		if err := w.WriteDelta(&batcher.Delta{Text: word}); err != nil {
			return resp, err
		}
		if i == 0 {
			f.firstCh <- struct{}{}
			select {
			case <-f.gate:
			case <-ctx.Done():
				return resp, ctx.Err()
			}
		}
	}
	return batcher.Response{FinishReason: batcher.FinishStop, Usage: batcher.Usage{PromptTokens: 2, CompletionTokens: int32(len(words))}}, nil
}

const routeStream = "stream-chat"

// newStreamEnv is newEnv with a route whose backend streams.
func newStreamEnv(t *testing.T, sf *streamFake, opts ...envOption) *env {
	t.Helper()
	return newEnv(t, newFake(), append([]envOption{withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "streamer", Backend: sf, MaxConcurrency: 512,
			Retry: batcher.RetryPolicy{MaxRetries: 2}}),
		batcher.WithRoute(batcher.Route{Name: routeStream, Op: batcher.OpChat, Backend: "streamer"}),
	)}, opts...)...)
}

func streamedReq(id, text string) *batcherv1.Request {
	r := chatReq(id, text)
	r.Model, r.Stream = routeStream, true
	return r
}

// TestSubmitStreamInterleavesDeltas: many streamed and plain requests on
// one SubmitStream. Every streamed request's deltas come tagged with its
// id, interleaved with the other requests' messages, all before its
// Completion, and concatenate to its text; plain requests get no delta.
func TestSubmitStreamInterleavesDeltas(t *testing.T) {
	sf := newStreamFake()
	gate := make(chan struct{}) // every first delta, then the rest
	sf.gate = gate
	e := newStreamEnv(t, sf)
	ctx := testCtx(t)
	s := e.openStream(t, ctx)
	const n = 40
	for i := range n {
		s.send(reqMsg(streamedReq(fmt.Sprintf("s%d", i), fmt.Sprintf("one two three %d", i))))
		s.send(reqMsg(chatReq(fmt.Sprintf("p%d", i), "plain")))
	}
	for range n {
		<-sf.firstCh
	}
	deltas := map[string][]string{}
	done := map[string]*batcherv1.Completion{}
	sawFirsts := 0
	for len(done) < 2*n {
		m := s.next()
		if d := m.GetDelta(); d != nil {
			if done[d.GetId()] != nil {
				t.Fatalf("delta of %s after its completion", d.GetId())
			}
			if len(deltas[d.GetId()]) == 0 {
				sawFirsts++
			}
			deltas[d.GetId()] = append(deltas[d.GetId()], d.GetText())
			if sawFirsts == n && gate != nil {
				// Every request's first delta came before any second one:
				// they interleave.
				for id, ds := range deltas {
					if len(ds) != 1 {
						t.Fatalf("%s: %d deltas before the gate opened", id, len(ds))
					}
				}
				close(gate)
				gate = nil
			}
			continue
		}
		if c := m.GetCompletion(); c != nil {
			done[c.GetId()] = c
			continue
		}
		if m.GetEvent() != nil {
			continue
		}
		t.Fatalf("unexpected message %v", m)
	}
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		c := done[id]
		want := fmt.Sprintf("echo: one two three %d", i)
		if got := strings.Join(deltas[id], ""); got != want || c.GetText() != want || c.GetError() != nil {
			t.Errorf("%s: deltas %q, completion %q (%v), want %q", id, got, c.GetText(), c.GetError(), want)
		}
		if c.GetTimeToFirstToken() == nil || c.GetBatchSize() != 1 {
			t.Errorf("%s: completion %v: want a time to first token and a batch of 1", id, c)
		}
		if p := fmt.Sprintf("p%d", i); len(deltas[p]) != 0 || done[p].GetText() != "echo: plain" {
			t.Errorf("%s: %d deltas, completion %v", p, len(deltas[p]), done[p])
		}
	}
}

// TestSubmitStreamCancelMidStream: a Cancel for a streamed request whose
// deltas are flowing closes its upstream call at once, and its Completion
// is CANCELLED, partial, with the text streamed so far.
func TestSubmitStreamCancelMidStream(t *testing.T) {
	sf := newStreamFake()
	sf.gate = make(chan struct{}) // held after the first delta
	e := newStreamEnv(t, sf)
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(streamedReq("s", "never finished")))
	d := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetDelta() != nil }).GetDelta()
	if d.GetId() != "s" || d.GetText() != "echo: " {
		t.Fatalf("first delta %v", d)
	}
	s.send(cancelMsg("s"))
	if err := <-sf.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("upstream call ended with %v, want its context cancelled", err)
	}
	c := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetCompletion() != nil }).GetCompletion()
	if codes.Code(c.GetError().GetCode()) != codes.Canceled || !c.GetPartial() || c.GetText() != "echo: " {
		t.Fatalf("completion %v, want CANCELLED, partial", c)
	}
}

// TestSubmitStreamedCallerLeaves: a SubmitStreamed caller that goes away
// mid-answer (its RPC cancelled) closes the upstream call at once.
func TestSubmitStreamedCallerLeaves(t *testing.T) {
	sf := newStreamFake()
	sf.gate = make(chan struct{}) // held after the first delta
	e := newStreamEnv(t, sf)
	// No deadline: only the caller's leaving may end the call.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rs, err := e.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: streamedReq("", "never finished")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rs.Recv()
	if err != nil || m.GetDelta().GetText() != "echo: " {
		t.Fatalf("first message %v, %v: want the first delta", m, err)
	}
	cancel()
	select {
	case err := <-sf.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("upstream call ended with %v, want its context cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call is still open 10s after its caller left")
	}
	if _, err := rs.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("after the cancel: %v, want CANCELLED", err)
	}
}

// TestSubmitStreamedRPC: the server-streaming RPC sends the deltas, then
// the Completion; a failure after the first delta is not retried: the
// Completion is partial and the RPC ends with the failure's status.
func TestSubmitStreamedRPC(t *testing.T) {
	sf := newStreamFake()
	e := newStreamEnv(t, sf)
	ctx := testCtx(t)
	read := func(r *batcherv1.Request) (text string, c *batcherv1.Completion, err error) {
		rs, err := e.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: r})
		if err != nil {
			t.Fatal(err)
		}
		for {
			m, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				return text, c, nil
			}
			if err != nil {
				return text, c, err
			}
			if c != nil {
				t.Fatalf("message after the completion: %v", m)
			}
			if d := m.GetDelta(); d != nil {
				text += d.GetText()
			}
			c = m.GetCompletion()
		}
	}
	r := chatReq("", "a b c") // stream need not be set; the route need not be
	r.Model = routeStream
	text, c, err := read(r)
	if err != nil || text != "echo: a b c" || c.GetText() != text || c.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_STOP {
		t.Fatalf("text %q, completion %v, err %v", text, c, err)
	}

	sf.failAfter = 2
	text, c, err = read(streamedReq("f", "a b c"))
	if status.Code(err) != codes.Unavailable || text != "echo: a " || !c.GetPartial() || c.GetText() != text || c.GetAttempts() != 1 {
		t.Fatalf("text %q, completion %v, err %v: want UNAVAILABLE after a partial answer, one attempt", text, c, err)
	}

	bad := streamedReq("e", "x")
	bad.Model = routeEmbed
	bad.Input = &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "x"}}
	if _, _, err := read(bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "request.stream") {
		t.Fatalf("an embedding streamed: %v, want INVALID_ARGUMENT naming request.stream", err)
	}
}

// floodStreamer writes 8 KiB text deltas until the core refuses one.
type floodStreamer struct {
	written atomic.Int64
	ended   chan struct{}
}

func (f *floodStreamer) Dispatch(context.Context, *batcher.Batch, []batcher.Response) error {
	return errors.New("floodStreamer: only streams")
}

func (f *floodStreamer) Stream(ctx context.Context, _ *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	defer close(f.ended)
	chunk := strings.Repeat("x", 8<<10)
	for ctx.Err() == nil {
		if err := w.WriteDelta(&batcher.Delta{Text: chunk}); err != nil {
			return batcher.Response{}, err
		}
		f.written.Add(1)
	}
	return batcher.Response{}, ctx.Err()
}

// compressionRows are the rows of a test that runs on a plain stream and
// on a compressed one, whose message buffers gRPC frees before its writer
// takes the bytes, so that no probe is sent there (probesWork).
var compressionRows = []struct {
	name string
	opts []grpc.CallOption
}{
	{"plain", nil},
	{"compressed", []grpc.CallOption{grpc.UseCompressor(gzip.Name)}},
}

// newFloodEnv is an env whose model "flood" is a floodStreamer, with a
// stream buffer of 4 deltas and 256 KiB unread.
func newFloodEnv(t *testing.T) (*env, *floodStreamer) {
	t.Helper()
	flood := &floodStreamer{ended: make(chan struct{})}
	e := newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "flood", Backend: flood}),
		batcher.WithRoute(batcher.Route{Name: "flood", Op: batcher.OpChat, Backend: "flood"}),
		batcher.WithStreamBuffer(4, 256<<10),
	))
	return e, flood
}

// TestSubmitStreamSlowReader: a caller that stops reading its stream while
// a streamed request floods it. The request's deltas wait in the core's
// bounded buffer, coalesce, and once more than its limit is unread the
// request is cancelled (RESOURCE_EXHAUSTED): memory does not grow with the
// flood. Nothing is lost: its delta messages, joined per take, add up to
// its completion's partial text; and a plain request on the same stream
// still gets its completion. The straight sends of the request's deltas
// (streamSends) stop before they could wait on the caller; on a compressed
// stream, where probes would tell too early, there are none.
func TestSubmitStreamSlowReader(t *testing.T) {
	for _, tc := range compressionRows {
		t.Run(tc.name, func(t *testing.T) {
			e, flood := newFloodEnv(t)
			gs, err := e.client.SubmitStream(testCtx(t), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			s := &streamClient{t: t, BatcherService_SubmitStreamClient: gs}
			big := chatReq("big", "flood me")
			big.Model, big.Stream = "flood", true
			s.send(reqMsg(big))
			<-flood.ended // nobody reads: the core cut the flood off
			s.send(reqMsg(chatReq("p", "plain")))
			var text strings.Builder
			msgs := 0
			done := map[string]*batcherv1.Completion{}
			for len(done) < 2 {
				m := s.next()
				if d := m.GetDelta(); d != nil {
					if d.GetId() != "big" || done["big"] != nil {
						t.Fatalf("unexpected delta %s (after its completion: %v)", d.GetId(), done["big"] != nil)
					}
					text.WriteString(d.GetText())
					msgs++
				}
				if c := m.GetCompletion(); c != nil {
					done[c.GetId()] = c
				}
			}
			c := done["big"]
			if codes.Code(c.GetError().GetCode()) != codes.ResourceExhausted || !c.GetPartial() {
				t.Fatalf("flooded request: error %v, partial %v; want RESOURCE_EXHAUSTED, partial", c.GetError(), c.GetPartial())
			}
			if text.String() != c.GetText() {
				t.Fatalf("deltas hold %d bytes, the completion %d: something was lost", text.Len(), len(c.GetText()))
			}
			if n := flood.written.Load(); int64(msgs) >= n {
				t.Fatalf("%d delta messages for %d deltas written: none coalesced or joined", msgs, n)
			}
			if p := done["p"]; p.GetError() != nil || p.GetText() == "" {
				t.Fatalf("plain request: %v", p)
			}
		})
	}
}

// TestSubmitStreamedInvalid: the streamed door names every bad field as
// Submit and SubmitStream do (badRequests), before any upstream call.
func TestSubmitStreamedInvalid(t *testing.T) {
	e := newStreamEnv(t, newStreamFake())
	ctx := testCtx(t)
	for _, tt := range badRequests() {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := e.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: tt.req})
			if err == nil {
				for err == nil {
					_, err = rs.Recv()
				}
			}
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tt.field+": ") {
				t.Fatalf("SubmitStreamed = %v %q, want INVALID_ARGUMENT naming %s", st.Code(), st.Message(), tt.field)
			}
		})
	}
}

// burstStreamer writes n text deltas of size bytes each, then ends.
type burstStreamer struct {
	n, size int
	ended   chan struct{}
}

func (f *burstStreamer) Dispatch(context.Context, *batcher.Batch, []batcher.Response) error {
	return errors.New("burstStreamer: only streams")
}

func (f *burstStreamer) Stream(_ context.Context, _ *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	defer close(f.ended)
	for i := range f.n {
		if err := w.WriteDelta(&batcher.Delta{Text: strings.Repeat(string(rune('a'+i%26)), f.size)}); err != nil {
			return batcher.Response{}, err
		}
	}
	return batcher.Response{FinishReason: batcher.FinishStop}, nil
}

// TestSubmitStreamedJoinsWaitingDeltas: deltas that pile up while a Send
// waits (here on flow control: the caller reads nothing until the answer
// is written) go as one message each take, not one a delta, and nothing
// is lost.
func TestSubmitStreamedJoinsWaitingDeltas(t *testing.T) {
	burst := &burstStreamer{n: 40, size: 8 << 10, ended: make(chan struct{})}
	e := newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "burst", Backend: burst}),
		batcher.WithRoute(batcher.Route{Name: "burst", Op: batcher.OpChat, Backend: "burst"}),
	))
	ctx := testCtx(t)
	r := chatReq("b", "burst")
	r.Model = "burst"
	rs, err := e.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: r})
	if err != nil {
		t.Fatal(err)
	}
	<-burst.ended // 320 KiB written; the stream's window holds 64
	var text strings.Builder
	msgs := 0
	for {
		m, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := m.GetDelta(); d != nil && d.GetText() != "" {
			text.WriteString(d.GetText())
			msgs++
		}
		if c := m.GetCompletion(); c != nil && (c.GetError() != nil || c.GetText() != text.String()) {
			t.Fatalf("completion %d bytes, error %v; the deltas held %d bytes", len(c.GetText()), c.GetError(), text.Len())
		}
	}
	if text.Len() != burst.n*burst.size {
		t.Fatalf("deltas held %d bytes, want %d", text.Len(), burst.n*burst.size)
	}
	if msgs >= burst.n {
		t.Fatalf("%d delta messages for %d deltas: none joined", msgs, burst.n)
	}
	t.Logf("%d deltas in %d messages", burst.n, msgs)
}

// readStreamed reads a SubmitStreamed RPC to its end: the deltas' text, the
// Completion, and the RPC's error.
func readStreamed(t *testing.T, rs batcherv1.BatcherService_SubmitStreamedClient) (text string, c *batcherv1.Completion, err error) {
	t.Helper()
	var b strings.Builder
	for {
		m, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return b.String(), c, nil
		}
		if err != nil {
			return b.String(), c, err
		}
		if c != nil {
			t.Fatalf("message after the completion: %v", m)
		}
		b.WriteString(m.GetDelta().GetText())
		c = m.GetCompletion()
	}
}

// TestSubmitStreamedStraightThenBuffered: a long answer of small deltas
// written as fast as they come. The first go to gRPC straight from the
// backend's goroutine (streamedSender), the rest, once the straight budget
// is spent or while the handler sends, through the core's buffer: every
// delta arrives once and in order, all before the Completion.
func TestSubmitStreamedStraightThenBuffered(t *testing.T) {
	burst := &burstStreamer{n: 3000, size: 16, ended: make(chan struct{})}
	e := newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "burst", Backend: burst}),
		batcher.WithRoute(batcher.Route{Name: "burst", Op: batcher.OpChat, Backend: "burst"}),
	))
	r := chatReq("b", "burst")
	r.Model = "burst"
	rs, err := e.client.SubmitStreamed(testCtx(t), &batcherv1.SubmitStreamedRequest{Request: r})
	if err != nil {
		t.Fatal(err)
	}
	text, c, err := readStreamed(t, rs)
	var want strings.Builder
	for i := range burst.n {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), burst.size))
	}
	if err != nil || text != want.String() || c.GetText() != text || c.GetError() != nil {
		t.Fatalf("deltas %d bytes (want %d, in order: %v), completion %d bytes, error %v, RPC %v",
			len(text), want.Len(), text == want.String(), len(c.GetText()), c.GetError(), err)
	}
}

// TestSubmitStreamedStalledCaller: a caller that reads nothing while its
// answer floods in. No send of the backend's goroutine waits on it (the
// straight budget is below gRPC's write quota), so the core's buffer
// coalesces, overflows and cuts the upstream call off, and the caller then
// gets the partial text whole and RESOURCE_EXHAUSTED. On a compressed
// stream, whose message buffers gRPC frees before its writer takes the
// bytes, the sender sends no probes (probesWork): a probe's early word
// would let straight sends run on past the write quota, and the flood
// would never end.
func TestSubmitStreamedStalledCaller(t *testing.T) {
	for _, tc := range compressionRows {
		t.Run(tc.name, func(t *testing.T) {
			e, flood := newFloodEnv(t)
			r := chatReq("f", "flood me")
			r.Model = "flood"
			rs, err := e.client.SubmitStreamed(testCtx(t), &batcherv1.SubmitStreamedRequest{Request: r}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			<-flood.ended // nobody reads: the core cut the flood off
			text, c, err := readStreamed(t, rs)
			if status.Code(err) != codes.ResourceExhausted || !c.GetPartial() || codes.Code(c.GetError().GetCode()) != codes.ResourceExhausted {
				t.Fatalf("RPC %v, completion error %v, partial %v: want RESOURCE_EXHAUSTED, partial", err, c.GetError(), c.GetPartial())
			}
			if text != c.GetText() || text == "" {
				t.Fatalf("deltas hold %d bytes, the completion %d: something was lost", len(text), len(c.GetText()))
			}
		})
	}
}
