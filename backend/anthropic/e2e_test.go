package anthropic_test

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

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// newCore returns a Batcher with be as backend "claude" on chat route
// "claude-sonnet" (llmsim's model sim-chat), shut down when the test ends.
func newCore(t *testing.T, be batcher.Backend) *batcher.Batcher {
	t.Helper()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "claude", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: "claude-sonnet", Op: batcher.OpChat, Backend: "claude", Model: "sim-chat", DefaultMaxTokens: 32}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := core.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return core
}

func userTurn(text string) *batcher.Request {
	return &batcher.Request{Route: "claude-sonnet", Priority: batcher.PriorityNormal,
		Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: text}}}}
}

// TestCoreRefusesWhatAnthropicLacks: the backend's declared features make
// the core refuse, naming the field, what the Messages API cannot carry,
// before any upstream call.
func TestCoreRefusesWhatAnthropicLacks(t *testing.T) {
	sim, url := startSim(t, llmsim.Config{})
	core := newCore(t, newBackend(t, anthropic.Config{BaseURL: url}))
	for _, tc := range []struct {
		field string
		set   func(r *batcher.Request)
	}{
		{"params.logprobs", func(r *batcher.Request) { r.Params.MutableRich().Logprobs = true }},
		{"params.n", func(r *batcher.Request) { r.Params.MutableRich().N = 2 }},
		{"response_format", func(r *batcher.Request) {
			r.MutableChat().ResponseFormat = batcher.ResponseFormat{Type: batcher.FormatJSONObject}
		}},
		{"params.presence_penalty", func(r *batcher.Request) { v := float32(1); r.Params.MutableRich().PresencePenalty = &v }},
		{"params.reasoning_effort", func(r *batcher.Request) { r.Params.MutableRich().ReasoningEffort = "high" }},
		{"params.seed", func(r *batcher.Request) { v := int64(7); r.Params.Seed = &v }},
	} {
		r := userTurn("hello")
		tc.set(r)
		_, err := core.Do(context.Background(), r)
		var ve *batcher.ValidationError // refused at admission, not by the backend
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: %v, want the core's refusal naming it", tc.field, err)
		}
	}
	if n := sim.Stats().Requests; n != 0 {
		t.Errorf("%d upstream calls for refused requests", n)
	}
}

// TestCoreChatAndStream: through the core, a request gets llmsim's answer
// with the route's default max_tokens, and a streamed one its deltas.
func TestCoreChatAndStream(t *testing.T) {
	_, url := startSim(t, llmsim.Config{APIKey: "sk-ant-test"})
	be := newBackend(t, anthropic.Config{BaseURL: url, APIKeyEnv: "ANTHROPIC_API_KEY",
		LookupEnv: func(string) (string, bool) { return "sk-ant-test", true }})
	core := newCore(t, be)
	res, err := core.Do(context.Background(), userTurn("Why is the sea salty?"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := llmsim.Reply("Why is the sea salty?", 32, llmsim.DefaultReplyTokens)
	if res.Text != want || res.FinishReason != batcher.FinishStop || res.Usage.CompletionTokens == 0 {
		t.Errorf("got %q %v %+v, want %q", res.Text, res.FinishReason, res.Usage, want)
	}

	r := userTurn("Why is the sea salty?")
	r.Stream = true
	call, err := core.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var buf []batcher.Delta
	for more := true; more; {
		<-call.DeltasReady()
		var ds []batcher.Delta
		ds, more = call.Deltas(buf[:0])
		for _, d := range ds {
			text.WriteString(d.Text)
		}
	}
	<-call.Done()
	if got := call.Result(); got.Err != nil || text.String() != want || got.Usage != res.Usage {
		t.Errorf("streamed %q (%v, %+v), want %q and %+v", text.String(), got.Err, got.Usage, want, res.Usage)
	}
}

// TestWrongKeyIsAuth: llmsim checks x-api-key; a wrong key is an auth
// failure whose message leaks no key.
func TestWrongKeyIsAuth(t *testing.T) {
	_, url := startSim(t, llmsim.Config{APIKey: "sk-ant-right"})
	be := newBackend(t, anthropic.Config{BaseURL: url, APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "sk-ant-wrong1", true }})
	b := &batcher.Batch{Route: "r", Model: "sim-chat", Op: batcher.OpChat, Requests: []*batcher.Request{userTurn("hi")}, MaxTokens: 8}
	err := be.Dispatch(context.Background(), b, make([]batcher.Response, 1))
	if batcher.ClassOf(err) != batcher.ClassAuth || strings.Contains(err.Error(), "sk-ant") {
		t.Errorf("wrong key: %v", err)
	}
}

// TestStreamReusesTheConnection: a streamed call reads its response to the
// end after message_stop, so that the next call reuses its connection
// rather than dialling anew.
func TestStreamReusesTheConnection(t *testing.T) {
	sim, err := llmsim.New(llmsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns := 0
	// The response ends a moment after message_stop, as over a network: a
	// reader that stops at message_stop closes the body before its end.
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
	be := newBackend(t, anthropic.Config{BaseURL: ts.URL, APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "sk-ant-test", true }})
	for i := range 3 {
		b := &batcher.Batch{Route: "r", Model: "sim-chat", Op: batcher.OpChat, Requests: []*batcher.Request{userTurn("hi")}, MaxTokens: 8}
		var w deltaText
		if _, err := be.Stream(context.Background(), b, &w); err != nil || w.String() == "" {
			t.Fatalf("call %d: %q, %v", i, w.String(), err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 1 {
		t.Fatalf("3 streamed calls in turn opened %d connections, want 1", conns)
	}
}

// deltaText is a DeltaWriter that keeps the text.
type deltaText struct{ strings.Builder }

func (d *deltaText) WriteDelta(x *batcher.Delta) error {
	d.WriteString(x.Text)
	return nil
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
	be := newBackend(t, anthropic.Config{BaseURL: ts.URL, Timeout: 50 * time.Millisecond, APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "sk-ant-test", true }})
	b := &batcher.Batch{Route: "r", Model: "sim-chat", Op: batcher.OpChat, Requests: []*batcher.Request{userTurn("hi")}, MaxTokens: 8}
	_, err := be.Stream(context.Background(), b, &deltaText{})
	if batcher.ClassOf(err) != batcher.ClassTimeout || errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want a timeout", err)
	}
	<-gone
}
