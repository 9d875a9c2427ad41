package openai_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// deltaLog is a DeltaWriter that keeps what it is given.
type deltaLog struct {
	mu    sync.Mutex
	texts []string
	tools []batcher.ToolCallDelta
	first chan struct{} // closed on the first delta
	once  sync.Once
}

func newDeltaLog() *deltaLog { return &deltaLog{first: make(chan struct{})} }

func (l *deltaLog) WriteDelta(d *batcher.Delta) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.texts = append(l.texts, d.Text)
	l.tools = append(l.tools, d.ToolCalls...)
	l.once.Do(func() { close(l.first) })
	return nil
}

func (l *deltaLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.texts, "")
}

func streamBatch(r *batcher.Request) *batcher.Batch {
	return &batcher.Batch{ID: "b1", Route: r.Route, Model: "sim-chat", Op: r.Input.Op, Requests: []*batcher.Request{r}, MaxTokens: 64}
}

// TestStreamFromLLMSim: chat and completions stream from llmsim one word a
// delta, with the usage of the last chunk and the finish reason.
func TestStreamFromLLMSim(t *testing.T) {
	_, url := startSim(t, llmsim.Config{})
	be := newBackend(t, openai.Config{BaseURL: url})
	for _, r := range []*batcher.Request{chat("r", "hello there"), completion("r", "hello there")} {
		l := newDeltaLog()
		resp, err := be.Stream(context.Background(), streamBatch(r), l)
		want, _ := llmsim.Reply("hello there", 64, llmsim.DefaultReplyTokens)
		if err != nil || l.text() != want || len(l.texts) < 3 {
			t.Fatalf("%s: %d deltas %q, err %v; want %q", r.Input.Op, len(l.texts), l.text(), err, want)
		}
		if resp.FinishReason != batcher.FinishStop || resp.Usage.CompletionTokens != int32(llmsim.Tokens(want)) {
			t.Fatalf("%s: response %+v", r.Input.Op, resp)
		}
	}
}

// TestStreamMidStreamFaults: each llmsim fault after the first delta is
// an error of its class.
func TestStreamMidStreamFaults(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   llmsim.Config
		class batcher.ErrorClass
	}{
		{"cut", llmsim.Config{StreamCutRate: 1}, batcher.ClassNetwork},
		{"malformed", llmsim.Config{StreamMalformedRate: 1}, batcher.ClassInvalidResponse},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, url := startSim(t, tt.cfg)
			be := newBackend(t, openai.Config{BaseURL: url})
			l := newDeltaLog()
			_, err := be.Stream(context.Background(), streamBatch(chat("r", "a longer prompt to stream")), l)
			if batcher.ClassOf(err) != tt.class || l.text() == "" {
				t.Fatalf("err %v (class %v) after %q, want class %v after some text", err, batcher.ClassOf(err), l.text(), tt.class)
			}
		})
	}
}

// TestStreamCancelClosesTheConnection: cancelling a stream that stalls
// mid-answer closes the connection at once: llmsim sees it.
func TestStreamCancelClosesTheConnection(t *testing.T) {
	closed := make(chan struct{}, 1)
	_, url := startSim(t, llmsim.Config{StreamStallRate: 1, OnStreamClosed: func() { closed <- struct{}{} }})
	be := newBackend(t, openai.Config{BaseURL: url})
	ctx, cancel := context.WithCancel(context.Background())
	l := newDeltaLog()
	errc := make(chan error, 1)
	go func() {
		_, err := be.Stream(ctx, streamBatch(chat("r", "stall after a word or two")), l)
		errc <- err
	}()
	<-l.first
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want cancelled", err)
	}
	<-closed // llmsim saw the client go
}

// TestStreamThroughTheCore: a fault after the first delta ends the request
// with its partial text and the error, without a retry; a cancel closes
// the upstream connection.
func TestStreamThroughTheCore(t *testing.T) {
	sim, url := startSim(t, llmsim.Config{StreamCutRate: 1})
	be := newBackend(t, openai.Config{BaseURL: url})
	core := newCore(t, []batcher.BackendConfig{{Name: "up", Backend: be,
		Retry: batcher.RetryPolicy{MaxRetries: 3, InitialBackoff: time.Millisecond}}},
		[]batcher.Route{{Name: "r", Op: batcher.OpChat, Backend: "up", Model: "sim-chat"}})
	r := chat("r", "cut this answer short please")
	r.ID, r.Stream = "s", true
	c, err := core.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	res := c.Result()
	if batcher.ClassOf(res.Err) != batcher.ClassNetwork || !res.Partial || res.Text == "" || res.Attempts != 1 {
		t.Fatalf("result %+v: want a network error after partial text, one attempt", res)
	}
	if st := sim.Stats(); st.Streams != 1 || st.StreamCuts != 1 {
		t.Fatalf("llmsim saw %d streams (%d cut), want 1: no retry", st.Streams, st.StreamCuts)
	}
}

// TestStreamStallEndsPartial: an upstream that stalls after the first
// delta is cut off by the backend's StreamIdleTimeout: the request ends
// partial with ErrStreamStalled (a timeout), without a retry, and llmsim
// sees the connection close.
func TestStreamStallEndsPartial(t *testing.T) {
	closed := make(chan struct{}, 1)
	sim, url := startSim(t, llmsim.Config{StreamStallRate: 1, OnStreamClosed: func() { closed <- struct{}{} }})
	be := newBackend(t, openai.Config{BaseURL: url})
	core := newCore(t, []batcher.BackendConfig{{Name: "up", Backend: be, StreamIdleTimeout: 50 * time.Millisecond,
		Retry: batcher.RetryPolicy{MaxRetries: 3, InitialBackoff: time.Millisecond}}},
		[]batcher.Route{{Name: "r", Op: batcher.OpChat, Backend: "up", Model: "sim-chat"}})
	r := chat("r", "stall this answer after a word or two")
	r.ID, r.Stream = "s", true
	c, err := core.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	res := c.Result()
	if !errors.Is(res.Err, batcher.ErrStreamStalled) || batcher.ClassOf(res.Err) != batcher.ClassTimeout ||
		!res.Partial || res.Text == "" || res.Attempts != 1 {
		t.Fatalf("result %+v: want a stall (timeout) after partial text, one attempt", res)
	}
	if !strings.Contains(res.Err.Error(), "stalled") {
		t.Fatalf("error %q does not name the stall", res.Err)
	}
	<-closed // the upstream call was closed
	if st := sim.Stats(); st.Streams != 1 || st.StreamStalls != 1 {
		t.Fatalf("llmsim saw %d streams (%d stalled), want 1: no retry", st.Streams, st.StreamStalls)
	}
}

// TestStreamErrorStatus: a refusal before the stream starts is the
// status's error, as for any call.
func TestStreamErrorStatus(t *testing.T) {
	_, url := startSim(t, llmsim.Config{APIKey: "sk-right"})
	be := newBackend(t, openai.Config{BaseURL: url})
	_, err := be.Stream(context.Background(), streamBatch(chat("r", "x")), newDeltaLog())
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) || ue.StatusCode != http.StatusUnauthorized {
		t.Fatalf("err %v, want the 401", err)
	}
}

// TestStreamReusesTheConnection: a streamed call reads its response to the
// end after [DONE], so that the next call reuses its connection rather
// than dialling anew.
func TestStreamReusesTheConnection(t *testing.T) {
	sim, err := llmsim.New(llmsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns := 0
	// The response ends a moment after [DONE], as over a network: a
	// reader that stops at [DONE] closes the body before its end.
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sim.ServeHTTP(w, r)
		_ = http.NewResponseController(w).Flush()
		time.Sleep(time.Millisecond)
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	ts.Start()
	t.Cleanup(func() { sim.Close(); ts.Close() })
	be := newBackend(t, openai.Config{BaseURL: ts.URL + "/v1"})
	for i := range 3 {
		l := newDeltaLog()
		if _, err := be.Stream(context.Background(), streamBatch(chat("r", "hello there")), l); err != nil || l.text() == "" {
			t.Fatalf("call %d: %q, %v", i, l.text(), err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Fatalf("3 streamed calls in turn opened %d connections, want 1", conns)
	}
}

// TestStreamHeaderTimeout: a streamed call whose response's headers do not
// come within Timeout ends as a timeout (a retryable failure), not as if
// its caller had cancelled it, and the upstream sees it go.
func TestStreamHeaderTimeout(t *testing.T) {
	gone := make(chan struct{}, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // read: the server then watches the connection
		<-r.Context().Done()               // no headers, ever
		gone <- struct{}{}
	}))
	t.Cleanup(ts.Close)
	be := newBackend(t, openai.Config{BaseURL: ts.URL + "/v1", Timeout: 50 * time.Millisecond})
	_, err := be.Stream(context.Background(), streamBatch(chat("r", "x")), newDeltaLog())
	if batcher.ClassOf(err) != batcher.ClassTimeout || errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want a timeout", err)
	}
	<-gone
}

// TestStreamTimerPhases: one timer a call bounds the wait for the headers
// (Timeout: a call whose headers never come ends as a timeout, and the
// upstream sees it go) and then the drain after [DONE] (a response that
// goes on after it is cut, the answer kept, the connection closed); the
// calls between, on the same backend, whose timers are pooled, are not cut
// by an earlier call's timer.
func TestStreamTimerPhases(t *testing.T) {
	gone := make(chan string, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mode := "plain"
		for _, m := range []string{"hang", "linger"} {
			if strings.Contains(string(body), m) {
				mode = m
			}
		}
		defer func() { gone <- mode }()
		if mode == "hang" { // no headers, ever
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		_ = http.NewResponseController(w).Flush()
		if mode == "linger" { // the body never ends
			<-r.Context().Done()
		}
	}))
	t.Cleanup(ts.Close)
	be := newBackend(t, openai.Config{BaseURL: ts.URL + "/v1", Timeout: 100 * time.Millisecond})
	for _, mode := range []string{"plain", "hang", "plain", "linger", "plain", "plain"} {
		l := newDeltaLog()
		_, err := be.Stream(context.Background(), streamBatch(chat("r", mode)), l)
		if mode == "hang" {
			if batcher.ClassOf(err) != batcher.ClassTimeout {
				t.Fatalf("%s: err %v, want a timeout", mode, err)
			}
		} else if err != nil || l.text() != "hi" {
			t.Fatalf("%s: %q, %v; want the answer", mode, l.text(), err)
		}
		if got := <-gone; got != mode { // the upstream saw this call end
			t.Fatalf("the upstream saw %q end, want %q", got, mode)
		}
	}
}
