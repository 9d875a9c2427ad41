package server

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/proto"
)

// TestSubmitStreamDeltasStraight: four long streamed answers (1,000
// numbered deltas each, about 48 KiB of messages in all) and plain
// requests on one SubmitStream whose caller keeps up. Probes keep the
// straight path open past the straight budget and across the plain
// requests' Completions, so nearly every delta goes straight from its
// upstream's reader, not through the sender (relayed); and each request's
// deltas come in order, whole, all before its Completion.
func TestSubmitStreamDeltasStraight(t *testing.T) {
	const streams, plain = 4, 4
	f := &pacedFake{n: 1000, ack: make(chan struct{}, streams), numbered: true}
	e := newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "numbered", Backend: f, MaxConcurrency: streams}),
		batcher.WithRoute(batcher.Route{Name: "numbered", Op: batcher.OpChat, Backend: "numbered"}),
	))
	s := e.openStream(t, testCtx(t))
	r0 := e.srv.relayed.Load()
	for i := range streams {
		r := chatReq("s"+strconv.Itoa(i), "a long answer")
		r.Model, r.Stream = "numbered", true
		s.send(reqMsg(r))
	}
	next := map[string]int{}
	texts := map[string]*strings.Builder{}
	done := map[string]*batcherv1.Completion{}
	for sent := 0; len(done) < streams+plain; {
		m := s.next()
		if c := m.GetCompletion(); c != nil {
			done[c.GetId()] = c
			continue
		}
		d := m.GetDelta()
		if d.GetText() == "" {
			continue // an answer's last delta: the finish reason
		}
		id := d.GetId()
		if done[id] != nil {
			t.Fatalf("a delta of %s after its completion", id)
		}
		if w := strconv.Itoa(next[id]) + " "; d.GetText() != w {
			t.Fatalf("delta %d of %s holds %q, want %q", next[id], id, d.GetText(), w)
		}
		next[id]++
		if texts[id] == nil {
			texts[id] = new(strings.Builder)
		}
		texts[id].WriteString(d.GetText())
		f.ack <- struct{}{}
		if next[id] == 500 && sent < plain { // mid-answer: Completions among the deltas
			s.send(reqMsg(chatReq("p"+strconv.Itoa(sent), "plain")))
			sent++
		}
	}
	for i := range streams {
		id := "s" + strconv.Itoa(i)
		c := done[id]
		if next[id] != f.n || c.GetError() != nil || c.GetText() != texts[id].String() {
			t.Fatalf("%s: %d deltas of %d, completion error %v, its text whole: %v", id, next[id], f.n, c.GetError(), c != nil && c.GetText() == texts[id].String())
		}
	}
	// Some go through the sender all the same: those of a reader that
	// finds another's straight send under way, or the sender sending.
	// Without probes, some 3,000 would.
	if n, total := e.srv.relayed.Load()-r0, streams*(f.n+1); n > int64(total/4) {
		t.Fatalf("the sender relayed %d of %d deltas: the straight path closed", n, total)
	}
}

// TestCompletionBytesBoundsSize holds completionBytes at or above what a
// stream's Completion message counts on the wire, for every field it
// bounds at its largest, and false for those it does not bound.
func TestCompletionBytesBoundsSize(t *testing.T) {
	long := strings.Repeat("x", 300)
	const maxDur, minDur = time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	cases := []struct {
		name  string
		req   batcher.Request
		res   batcher.Result
		bound bool
	}{
		{name: "empty", bound: true},
		{name: "plain", req: batcher.Request{ID: "r1"}, res: batcher.Result{Text: "ok", BatchID: "b1", BatchSize: 3, Attempts: 1, Backend: "fake"}, bound: true},
		{name: "largest", req: batcher.Request{ID: long, Metadata: map[string]string{"": "", long: long, "k": "v"}},
			res: batcher.Result{
				Text: long, BatchID: long, BatchSize: math.MinInt32, Attempts: math.MinInt32, Backend: long,
				FinishReason: batcher.FinishReason(255), Deduplicated: true, Cached: true,
				Usage:   batcher.Usage{PromptTokens: math.MinInt32, CompletionTokens: -1},
				Timings: batcher.Timings{BatchWait: minDur, Queued: maxDur, Upstream: minDur + 1, Total: minDur, FirstToken: maxDur},
			}, bound: true},
		{name: "failed", req: batcher.Request{ID: "r2"}, res: batcher.Result{Err: errors.New(long), Partial: true, Text: long, Timings: batcher.Timings{Total: minDur}}, bound: true},
		{name: "embedding", res: batcher.Result{Embedding: []float32{1, 2}}},
		{name: "details", res: batcher.Result{Err: batcher.ErrQueueFull}},
		{name: "tool calls", res: batcher.Result{Chat: &batcher.ChatOutput{ToolCalls: []batcher.ToolCall{{ID: "t", Name: "f"}}}}},
	}
	for _, tc := range cases {
		var m completionMsg
		c := m.fill(&tc.req, &tc.res)
		n, ok := completionBytes(c)
		if ok != tc.bound {
			t.Fatalf("%s: bounded %v, want %v", tc.name, ok, tc.bound)
		}
		size := proto.Size(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: c}})
		if ok && n < size {
			t.Fatalf("%s: completionBytes %d, under the message's %d bytes", tc.name, n, size)
		}
	}
}

// TestSubmitStreamCompletionsLockstep: a caller that waits for each
// Completion before it sends the next request gets each once, and the
// final summary counts them all.
func TestSubmitStreamCompletionsLockstep(t *testing.T) {
	const n = 200
	e := newEnv(t, newFake())
	s := e.openStream(t, testCtx(t))
	s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
	for i := range n {
		id := strconv.Itoa(i)
		s.send(reqMsg(chatReq(id, "x")))
		c := s.next().GetCompletion()
		if c.GetId() != id || c.GetError() != nil || c.GetText() == "" {
			t.Fatalf("request %s: got %v, want its Completion", id, c)
		}
	}
	_ = s.CloseSend()
	msgs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	if len(ta.completions) != 0 || ta.finals != 1 || ta.final.GetCompleted() != n || ta.final.GetInFlight() != 0 {
		t.Fatalf("after the last Completion: %d more, %d final summaries, final %v", len(ta.completions), ta.finals, ta.final)
	}
}
