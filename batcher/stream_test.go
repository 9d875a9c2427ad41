package batcher

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeStreamer is a Backend and Streamer with hooks: it streams the words
// of its answer one delta each.
type fakeStreamer struct {
	fakeBackend
	words []string
	// step, when set, is waited on before each delta (or ctx's end).
	step chan struct{}
	// fails makes the stream fail after failAt deltas; failOn picks the
	// attempts that fail (1-based; nil: every one).
	fails  bool
	failAt int
	failOn func(attempt int32) bool
	// ttft, when set, is slept before the first delta.
	ttft time.Duration

	streams  atomic.Int32
	mu       sync.Mutex
	sizes    []int   // requests per Stream call
	ctxEnded []error // ctx.Err() as each Stream returned
}

func (f *fakeStreamer) Stream(ctx context.Context, b *Batch, w DeltaWriter) (Response, error) {
	n := f.streams.Add(1)
	f.mu.Lock()
	f.sizes = append(f.sizes, len(b.Requests))
	f.mu.Unlock()
	end := func(err error) (Response, error) {
		f.mu.Lock()
		f.ctxEnded = append(f.ctxEnded, ctx.Err())
		f.mu.Unlock()
		return Response{}, err
	}
	if f.ttft > 0 {
		time.Sleep(f.ttft)
	}
	for i, word := range f.words {
		if f.fails && i == f.failAt && (f.failOn == nil || f.failOn(n)) {
			return end(&UpstreamError{Class: ClassServer, StatusCode: http.StatusBadGateway, Message: "cut mid-stream"})
		}
		if f.step != nil {
			select {
			case <-f.step:
			case <-ctx.Done():
				return end(ctx.Err())
			}
		}
		if err := w.WriteDelta(&Delta{Text: word}); err != nil {
			return end(err)
		}
	}
	f.mu.Lock()
	f.ctxEnded = append(f.ctxEnded, ctx.Err())
	f.mu.Unlock()
	return Response{FinishReason: FinishStop, Usage: Usage{PromptTokens: 3, CompletionTokens: int32(len(f.words))}}, nil
}

func streamReq(id string) *Request {
	r := req(id, PriorityNormal)
	r.Stream = true
	return r
}

// readAll drains a streamed call's deltas until its end.
func readAll(t *testing.T, c *Call) []Delta {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var all []Delta
	for {
		var more bool
		var err error
		all, more, err = c.NextDeltas(ctx, all)
		if err != nil {
			t.Fatalf("%s: NextDeltas: %v", c.req.ID, err)
		}
		if !more {
			return all
		}
	}
}

func joinText(ds []Delta) string {
	var sb strings.Builder
	for _, d := range ds {
		sb.WriteString(d.Text)
	}
	return sb.String()
}

// TestStreamDeltasThenWholeAnswer: a streamed request's deltas come in
// order, the last carries the finish reason and usage, and the result
// holds the whole text; streamed requests go upstream one each, while the
// route's other requests still batch.
func TestStreamDeltasThenWholeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeStreamer{words: []string{"a", "b", "c"}, ttft: 20 * time.Millisecond}
		b := newTest(t, be, 8, BatchConfig{MaxBatchSize: 4, MinBatchSize: 4, Window: time.Second})
		var calls []*Call
		for _, id := range []string{"s1", "s2", "s3"} {
			calls = append(calls, submit(t, b, streamReq(id)))
		}
		var plain []*Call
		for _, id := range []string{"p1", "p2", "p3", "p4"} {
			plain = append(plain, submit(t, b, req(id, PriorityNormal)))
		}
		for _, c := range calls {
			ds := readAll(t, c)
			if got := joinText(ds); got != "abc" {
				t.Errorf("%s: deltas %q, want abc", c.req.ID, got)
			}
			last := ds[len(ds)-1]
			if last.FinishReason != FinishStop || last.Usage == nil || last.Usage.CompletionTokens != 3 {
				t.Errorf("%s: last delta %+v, want finish stop with usage", c.req.ID, last)
			}
			r := c.Result()
			if r.Err != nil || r.Text != "abc" || r.Partial || r.BatchSize != 1 || r.Timings.FirstToken != 20*time.Millisecond {
				t.Errorf("%s: result %+v", c.req.ID, r)
			}
		}
		for _, c := range plain {
			<-c.Done()
			if r := c.Result(); r.Err != nil || r.BatchSize != 4 {
				t.Errorf("%s: result %+v, want a batch of 4", c.req.ID, r)
			}
		}
		if st := b.Stats()[0]; st.Streamed != 3 || st.Streaming != 0 {
			t.Errorf("stats: %d streamed, %d streaming; want 3 and 0", st.Streamed, st.Streaming)
		}
		be.mu.Lock()
		defer be.mu.Unlock()
		if len(be.sizes) != 3 || be.sizes[0] != 1 || be.sizes[1] != 1 || be.sizes[2] != 1 {
			t.Errorf("Stream calls carried %v requests, want [1 1 1]", be.sizes)
		}
	})
}

// TestStreamRetriesBeforeTheFirstDelta: an attempt that fails before any
// delta reached the caller is retried like any other.
func TestStreamRetriesBeforeTheFirstDelta(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeStreamer{words: []string{"x", "y"}, fails: true, failAt: 0}
		be.failOn = func(n int32) bool { return n == 1 }
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1},
			withRetry("be", RetryPolicy{MaxRetries: 2, InitialBackoff: time.Millisecond}))
		c := submit(t, b, streamReq("s"))
		ds := readAll(t, c)
		r := c.Result()
		if r.Err != nil || r.Text != "xy" || joinText(ds) != "xy" || r.Attempts != 2 {
			t.Fatalf("result %+v (deltas %q), want xy after 2 attempts", r, joinText(ds))
		}
	})
}

// TestStreamFailureAfterFirstDeltaIsTerminal: once a delta reached the
// caller, a failure is not retried or moved to a fallback: the request ends
// with the text so far, marked partial, and the error.
func TestStreamFailureAfterFirstDeltaIsTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeStreamer{words: []string{"x", "y", "z"}, fails: true, failAt: 2}
		backup := &fakeStreamer{words: []string{"backup"}}
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: be, Retry: RetryPolicy{MaxRetries: 3, InitialBackoff: time.Millisecond}}),
			WithBackend(BackendConfig{Name: "backup", Backend: backup}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Fallbacks: []Target{{Backend: "backup"}}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		c := submit(t, b, streamReq("s"))
		ds := readAll(t, c)
		r := c.Result()
		var ue *UpstreamError
		if !errors.As(r.Err, &ue) || ue.StatusCode != http.StatusBadGateway {
			t.Fatalf("err = %v, want the upstream's 502", r.Err)
		}
		if !r.Partial || r.Text != "xy" || joinText(ds) != "xy" {
			t.Fatalf("result text %q partial %v (deltas %q), want xy, partial", r.Text, r.Partial, joinText(ds))
		}
		if n, m := be.streams.Load(), backup.streams.Load(); n != 1 || m != 0 {
			t.Fatalf("streams: %d on be, %d on backup; want 1 and 0 (no retry, no fallback)", n, m)
		}
	})
}

// TestStreamCancelClosesTheUpstreamCall: cancelling a streamed request
// mid-stream ends its upstream call's context at once.
func TestStreamCancelClosesTheUpstreamCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeStreamer{words: []string{"a", "b", "c"}, step: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
		c := submit(t, b, streamReq("s"))
		be.step <- struct{}{} // one delta
		ds, _, err := c.NextDeltas(context.Background(), nil)
		if err != nil || joinText(ds) != "a" {
			t.Fatalf("first deltas %q, %v", joinText(ds), err)
		}
		c.Cancel()
		synctest.Wait()
		be.mu.Lock()
		ended := append([]error(nil), be.ctxEnded...)
		be.mu.Unlock()
		if len(ended) != 1 || !errors.Is(ended[0], context.Canceled) {
			t.Fatalf("the Stream call ended with ctx %v, want cancelled", ended)
		}
		r := c.Result()
		if !errors.Is(r.Err, ErrCanceled) || !r.Partial || r.Text != "a" {
			t.Fatalf("result %+v, want cancelled, partial a", r)
		}
		if _, more := c.Deltas(nil); more {
			t.Fatal("more deltas after the end")
		}
	})
}

// TestStreamSlowReaderCoalescesThenOverflows: a caller that does not read
// gets its text deltas folded together past the buffer's bound, and past
// the unread limit the request is cancelled with ErrStreamOverflow and its
// upstream call closed.
func TestStreamSlowReaderCoalescesThenOverflows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		words := make([]string, 40)
		for i := range words {
			words[i] = "0123456789"
		}
		be := &fakeStreamer{words: words[:8]}
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1}, WithStreamBuffer(4, 8*(deltaOverhead+10)))
		c := submit(t, b, streamReq("coalesced"))
		<-c.Done()
		ds, more := c.Deltas(nil)
		if more || len(ds) != 5 { // 4 waiting (the last holding 5 words), then the finish
			t.Fatalf("%d deltas (more %v), want 5", len(ds), more)
		}
		if got := ds[3].Text; got != strings.Repeat("0123456789", 5) {
			t.Fatalf("coalesced delta %q", got)
		}
		if r := c.Result(); r.Err != nil || joinText(ds) != strings.Repeat("0123456789", 8) {
			t.Fatalf("result %+v", r)
		}

		be.words = words
		c = submit(t, b, streamReq("overflow"))
		<-c.Done()
		r := c.Result()
		if !errors.Is(r.Err, ErrStreamOverflow) || !r.Partial {
			t.Fatalf("result %+v, want ErrStreamOverflow, partial", r)
		}
		synctest.Wait()
		if be.streams.Load() != 2 {
			t.Fatalf("%d streams, want 2 (no retry)", be.streams.Load())
		}
	})
}

// TestStreamOnABackendThatCannotStream: the whole answer comes as one
// delta.
func TestStreamOnABackendThatCannotStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 1, BatchConfig{MinBatchSize: 1})
		c := submit(t, b, streamReq("s"))
		ds := readAll(t, c)
		if len(ds) != 2 || ds[0].Text != "re:prompt s" || ds[1].FinishReason != FinishUnspecified || ds[1].Usage == nil {
			t.Fatalf("deltas %+v", ds)
		}
	})
}

// TestStreamRefused: streaming is refused, naming the field, where it
// cannot be honoured.
func TestStreamRefused(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{MinBatchSize: 1})
	r := streamReq("s")
	r.Dedup = DedupOn
	var ve *ValidationError
	if _, err := b.Submit(context.Background(), r); !errors.As(err, &ve) || ve.Field != "dedup" {
		t.Errorf("dedup on: %v", err)
	}
	r = streamReq("n")
	r.Params.MutableRich().N = 2
	if _, err := b.Submit(context.Background(), r); !errors.As(err, &ve) || ve.Field != "params.n" {
		t.Errorf("n 2: %v", err)
	}
	if _, err := b.Do(context.Background(), streamReq("s")); !errors.As(err, &ve) || ve.Field != "stream" {
		t.Errorf("Do: %v", err)
	}
	if _, err := New(WithStreamBuffer(0, 1)); err == nil || !strings.Contains(err.Error(), "stream buffer") {
		t.Errorf("WithStreamBuffer(0, 1): %v", err)
	}
}

// toolStreamer streams one tool call in pieces and a refusal.
type toolStreamer struct{ fakeBackend }

func (*toolStreamer) Stream(_ context.Context, _ *Batch, w DeltaWriter) (Response, error) {
	for _, d := range []Delta{
		{ToolCalls: []ToolCallDelta{{Index: 0, ID: "call_1", Name: "get"}}},
		{ToolCalls: []ToolCallDelta{{Index: 0, Arguments: `{"a":`}}},
		{ToolCalls: []ToolCallDelta{{Index: 0, Arguments: `1}`}}},
	} {
		if err := w.WriteDelta(&d); err != nil {
			return Response{}, err
		}
	}
	return Response{FinishReason: FinishStop}, nil
}

// TestStreamAssemblesToolCalls: the result of a streamed answer holds the
// tool calls its pieces make.
func TestStreamAssemblesToolCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &toolStreamer{}, 1, BatchConfig{MinBatchSize: 1})
		c := submit(t, b, streamReq("s"))
		ds := readAll(t, c)
		r := c.Result()
		if len(ds) != 4 || len(r.ChatOutput().ToolCalls) != 1 || r.ChatOutput().ToolCalls[0] != (ToolCall{ID: "call_1", Name: "get", Arguments: `{"a":1}`}) {
			t.Fatalf("%d deltas, result tool calls %+v", len(ds), r.ChatOutput().ToolCalls)
		}
	})
}

// maxTokensStreamer records each streamed batch's MaxTokens.
type maxTokensStreamer struct {
	fakeBackend
	got chan int32
}

func (m *maxTokensStreamer) Stream(_ context.Context, b *Batch, _ DeltaWriter) (Response, error) {
	m.got <- b.MaxTokens
	return Response{Text: "x"}, nil
}

// TestStreamBatchTakesTheRequestsMaxTokens: a streamed request's lane
// holds every max_tokens, so its batch carries the request's own.
func TestStreamBatchTakesTheRequestsMaxTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &maxTokensStreamer{got: make(chan int32, 2)}
		b, err := New(WithBackend(BackendConfig{Name: "be", Backend: be}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", DefaultMaxTokens: 100}))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		r := streamReq("own")
		r.Params.MaxTokens = 7
		<-submit(t, b, r).Done()
		<-submit(t, b, streamReq("default")).Done()
		if own, def := <-be.got, <-be.got; own != 7 || def != 100 {
			t.Fatalf("max tokens %d and %d, want 7 and the route's 100", own, def)
		}
	})
}

// TestJoinDeltas: runs of text and refusal deltas join; tool-call pieces
// and the last delta (finish reason, usage) stay apart, in order.
func TestJoinDeltas(t *testing.T) {
	u := &Usage{PromptTokens: 1, CompletionTokens: 3}
	tool := Delta{ToolCalls: []ToolCallDelta{{Index: 0, Name: "f", Arguments: "{}"}}}
	ds := []Delta{{Text: "a"}, {Text: "b"}, {Refusal: "r"}, tool, {Text: "c"}, {Text: "d"}, {FinishReason: FinishStop, Usage: u}}
	got := JoinDeltas(ds)
	want := []Delta{{Text: "ab", Refusal: "r"}, tool, {Text: "cd"}, {FinishReason: FinishStop, Usage: u}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JoinDeltas = %+v, want %+v", got, want)
	}
	if one := JoinDeltas([]Delta{{Text: "x"}}); len(one) != 1 || one[0].Text != "x" {
		t.Fatalf("one delta: %+v", one)
	}
	if none := JoinDeltas(nil); len(none) != 0 {
		t.Fatalf("no delta: %+v", none)
	}
}

// TestStreamTimeouts: a streamed attempt's timer (the run context's)
// bounds the wait for the first delta by the attempt timeout, an attempt
// timeout as any other, and after it each silence by the idle timeout:
// deltas that keep coming within it go on past both, and a stall ends the
// request partial with ErrStreamStalled. Either way the upstream call's
// context ends.
func TestStreamTimeouts(t *testing.T) {
	timeouts := withBackend("be", func(c *BackendConfig) {
		c.AttemptTimeout, c.StreamIdleTimeout = time.Second, 2*time.Second
	})
	t.Run("no first delta", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			be := &fakeStreamer{words: []string{"a"}, step: make(chan struct{})}
			b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1}, timeouts)
			c := submit(t, b, streamReq("s"))
			<-c.Done()
			r := c.Result()
			if ClassOf(r.Err) != ClassTimeout || !strings.Contains(r.Err.Error(), "attempt timeout of 1s") || r.Partial || r.Attempts < 2 {
				t.Fatalf("result %+v: want attempt timeouts, retried, not partial", r)
			}
			synctest.Wait()
			be.mu.Lock()
			defer be.mu.Unlock()
			if len(be.ctxEnded) != r.Attempts {
				t.Fatalf("%d Stream calls ended, want one for each of %d attempts", len(be.ctxEnded), r.Attempts)
			}
			for _, err := range be.ctxEnded {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a Stream call's context ended with %v, want the attempt timeout", err)
				}
			}
		})
	})
	t.Run("deltas within the idle timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			be := &fakeStreamer{words: []string{"a", "b", "c", "d"}, step: make(chan struct{})}
			b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1}, timeouts)
			c := submit(t, b, streamReq("s"))
			for range be.words {
				time.Sleep(1500 * time.Millisecond) // past the attempt timeout after the first
				be.step <- struct{}{}
			}
			ds := readAll(t, c)
			if r := c.Result(); r.Err != nil || joinText(ds) != "abcd" {
				t.Fatalf("result %+v, deltas %q: want abcd", r, joinText(ds))
			}
		})
	})
	t.Run("stall", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			be := &fakeStreamer{words: []string{"a", "b"}, step: make(chan struct{})}
			b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1}, timeouts)
			c := submit(t, b, streamReq("s"))
			time.Sleep(500 * time.Millisecond)
			be.step <- struct{}{}
			last := time.Now()
			<-c.Done()
			r := c.Result()
			if !errors.Is(r.Err, ErrStreamStalled) || ClassOf(r.Err) != ClassTimeout || !r.Partial || r.Text != "a" {
				t.Fatalf("result %+v: want a stall after a", r)
			}
			if d := time.Since(last); d != 2*time.Second {
				t.Fatalf("ended %v after the last delta, want the idle timeout of 2s", d)
			}
		})
	})
}
