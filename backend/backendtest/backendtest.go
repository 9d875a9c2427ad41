// Package backendtest is the contract every HTTP backend of Batcher
// passes, run against llmsim (which speaks each provider's dialect):
// backend/openai and backend/anthropic call Run from their tests, as
// River's drivers all pass riverdrivertest.
//
// The contract, each a subtest:
//   - plain chat: every request of a batch gets its own answer (llmsim's
//     echo of its prompt), a stop finish and usage, and the usage adds up
//     to what the upstream counted;
//   - the system prompt reaches the upstream (its tokens are counted);
//   - max_tokens is sent (a short budget cuts the answer: finish length);
//   - a tool-call round trip: a named tool choice gets a call whose
//     arguments are a JSON object of the tool's schema; the call and its
//     result sent back get a text answer;
//   - JSON output where the backend declares it;
//   - streaming: the deltas add up to the unstreamed answer, and the
//     final usage is the upstream's;
//   - the upstream's rate-limit headers reach Batch.RateLimit, and its 429
//     is a rate limit with the retry-after it asked for;
//   - through the core: a 429 with retry-after is retried no sooner than
//     asked; a 5xx and a 529 (overloaded) are retried; a 400 is not, and
//     its error carries the provider's message;
//   - a 400 from the upstream is an invalid request naming the cause;
//     an unknown model is not found;
//   - cancelling a call closes its upstream connection, streamed or not.
package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// Model is the llmsim model the suite's batches name.
const Model = "sim-chat"

// Target is a backend under test.
type Target struct {
	// New returns the backend talking to the llmsim served at baseURL
	// (http://127.0.0.1:port, without any path: New adds its API's
	// prefix). The backend must be closed when the test ends.
	New func(t testing.TB, baseURL string) batcher.Backend
	// JSON: the backend declares response_format json_object.
	JSON bool
	// StreamsToolCalls: llmsim streams this dialect's tool calls as
	// tool-call deltas.
	StreamsToolCalls bool
}

// Run runs the contract against target.
func Run(t *testing.T, target Target) {
	t.Run("PlainChat", func(t *testing.T) { testPlainChat(t, target) })
	t.Run("SystemPrompt", func(t *testing.T) { testSystemPrompt(t, target) })
	t.Run("MaxTokens", func(t *testing.T) { testMaxTokens(t, target) })
	t.Run("ToolRoundTrip", func(t *testing.T) { testToolRoundTrip(t, target) })
	t.Run("JSON", func(t *testing.T) { testJSON(t, target) })
	t.Run("Stream", func(t *testing.T) { testStream(t, target) })
	t.Run("StreamToolCall", func(t *testing.T) { testStreamToolCall(t, target) })
	t.Run("RateLimitHeaders", func(t *testing.T) { testRateLimitHeaders(t, target) })
	t.Run("RetryAfterHonoured", func(t *testing.T) { testRetryAfterHonoured(t, target) })
	t.Run("ServerErrorsRetried", func(t *testing.T) { testServerErrorsRetried(t, target) })
	t.Run("BadRequestNotRetried", func(t *testing.T) { testBadRequestNotRetried(t, target) })
	t.Run("BadRequestMessage", func(t *testing.T) { testBadRequestMessage(t, target) })
	t.Run("UnknownModel", func(t *testing.T) { testUnknownModel(t, target) })
	t.Run("CancelClosesCall", func(t *testing.T) { testCancelClosesCall(t, target) })
	t.Run("CancelClosesStream", func(t *testing.T) { testCancelClosesStream(t, target) })
}

// front is an http.Handler before llmsim: it counts calls, tells of each
// arrival and of each call whose client went away, and answers the next
// scripted calls itself.
type front struct {
	sim     *llmsim.Server
	calls   atomic.Int64
	arrived chan time.Time // one per call, when it arrived (buffered)
	gone    chan struct{}  // one per call whose client left before it ended

	mu     sync.Mutex
	script []scripted
}

// scripted is a canned answer: its status, headers and a body both
// dialects read ({"error":{"message":...}} is in OpenAI's and Anthropic's
// error bodies alike).
type scripted struct {
	status  int
	headers map[string]string
	message string
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	select {
	case f.arrived <- time.Now():
	default:
	}
	f.mu.Lock()
	var s *scripted
	if len(f.script) > 0 {
		s = &f.script[0]
		f.script = f.script[1:]
	}
	f.mu.Unlock()
	if s != nil {
		for k, v := range s.headers {
			w.Header().Set(k, v)
		}
		body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "scripted_error", "message": s.message}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.status)
		_, _ = w.Write(body)
		return
	}
	f.sim.ServeHTTP(w, r)
	if r.Context().Err() != nil {
		select {
		case f.gone <- struct{}{}:
		default:
		}
	}
}

func (f *front) push(s ...scripted) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, s...)
}

// start serves llmsim with cfg behind a front until the test ends, and
// returns the front and the target's backend for it.
func start(t *testing.T, target Target, cfg llmsim.Config) (*front, batcher.Backend) {
	t.Helper()
	f := &front{arrived: make(chan time.Time, 64), gone: make(chan struct{}, 64)}
	cfg.OnStreamClosed = func() {
		select {
		case f.gone <- struct{}{}:
		default:
		}
	}
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.sim = sim
	ts := httptest.NewServer(f)
	t.Cleanup(func() {
		sim.Close()
		ts.Close()
	})
	return f, target.New(t, ts.URL)
}

func chat(user string, system ...string) *batcher.Request {
	var msgs []batcher.Message
	for _, s := range system {
		msgs = append(msgs, batcher.Message{Role: "system", Content: s})
	}
	msgs = append(msgs, batcher.Message{Role: "user", Content: user})
	return &batcher.Request{Route: "r", Priority: batcher.PriorityNormal, Input: batcher.Input{Op: batcher.OpChat, Messages: msgs}}
}

// dispatch calls be directly with one batch of reqs.
func dispatch(ctx context.Context, be batcher.Backend, maxTokens int32, reqs ...*batcher.Request) ([]batcher.Response, *batcher.Batch, error) {
	b := &batcher.Batch{ID: "b1", Route: "r", Model: Model, Op: batcher.OpChat, Requests: reqs, MaxTokens: maxTokens}
	out := make([]batcher.Response, len(reqs))
	err := be.Dispatch(ctx, b, out)
	return out, b, err
}

func testPlainChat(t *testing.T, target Target) {
	f, be := start(t, target, llmsim.Config{})
	reqs := make([]*batcher.Request, 5)
	for i := range reqs {
		reqs[i] = chat(fmt.Sprintf("Question %d: why is the sky blue?", i))
	}
	out, _, err := dispatch(context.Background(), be, 64, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	var prompt, completion int64
	for i, r := range out {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
		want, _ := llmsim.Reply(reqs[i].Input.Messages[0].Content, 64, llmsim.DefaultReplyTokens)
		if r.Text != want {
			t.Errorf("request %d: text %q, want %q", i, r.Text, want)
		}
		if r.FinishReason != batcher.FinishStop {
			t.Errorf("request %d: finish %v, want stop", i, r.FinishReason)
		}
		if r.Usage.PromptTokens <= 0 || r.Usage.CompletionTokens <= 0 {
			t.Errorf("request %d: usage %+v", i, r.Usage)
		}
		prompt += int64(r.Usage.PromptTokens)
		completion += int64(r.Usage.CompletionTokens)
	}
	st := f.sim.Stats()
	if st.PromptTokens != prompt || st.CompletionTokens != completion {
		t.Errorf("usage %d+%d, the upstream counted %d+%d", prompt, completion, st.PromptTokens, st.CompletionTokens)
	}
	if got := f.calls.Load(); got != 5 {
		t.Errorf("%d upstream calls, want 5 (one per request)", got)
	}
}

func testSystemPrompt(t *testing.T, target Target) {
	_, be := start(t, target, llmsim.Config{})
	system := strings.Repeat("You answer briefly. ", 40) // 800 bytes: 200 tokens
	out, _, err := dispatch(context.Background(), be, 64, chat("Hello?"), chat("Hello?", system))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[1].Err != nil {
		t.Fatal(out[0].Err, out[1].Err)
	}
	if d := out[1].Usage.PromptTokens - out[0].Usage.PromptTokens; d < int32(llmsim.Tokens(system)) {
		t.Errorf("the system prompt added %d prompt tokens, want at least %d: it did not reach the upstream", d, llmsim.Tokens(system))
	}
	if out[0].Text != out[1].Text {
		t.Errorf("the system prompt changed the answer to the user's turn: %q vs %q", out[0].Text, out[1].Text)
	}
}

func testMaxTokens(t *testing.T, target Target) {
	_, be := start(t, target, llmsim.Config{})
	r := chat("Tell me a long story about the sea.")
	r.Params.MaxTokens = 3
	out, _, err := dispatch(context.Background(), be, 64, r)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].FinishReason != batcher.FinishLength || len(out[0].Text) > 12 {
		t.Errorf("max_tokens 3: finish %v, text %q; want length and at most 12 bytes", out[0].FinishReason, out[0].Text)
	}
}

var weather = batcher.Tool{Name: "get_weather", Description: "The weather in a city",
	Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`), Strict: true}

func testToolRoundTrip(t *testing.T, target Target) {
	_, be := start(t, target, llmsim.Config{})
	r := chat("What is the weather in Paris?")
	r.MutableChat().Tools = []batcher.Tool{weather}
	r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}
	out, _, err := dispatch(context.Background(), be, 64, r)
	if err != nil {
		t.Fatal(err)
	}
	a := out[0]
	if a.FinishReason != batcher.FinishToolCalls || len(a.ChatOutput().ToolCalls) != 1 {
		t.Fatalf("finish %v, %d tool calls; want tool calls, 1", a.FinishReason, len(a.ChatOutput().ToolCalls))
	}
	call := a.ChatOutput().ToolCalls[0]
	var args struct {
		City *string `json:"city"`
	}
	if call.Name != "get_weather" || call.ID == "" || json.Unmarshal([]byte(call.Arguments), &args) != nil || args.City == nil {
		t.Fatalf("tool call %+v: want get_weather with an id and a city", call)
	}

	// The call and its result go back; the model answers in text.
	r2 := chat("What is the weather in Paris?")
	r2.MutableChat().Tools = []batcher.Tool{weather}
	r2.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceAuto}
	r2.Input.Messages = append(r2.Input.Messages,
		batcher.Message{Role: "assistant", ToolCalls: []batcher.ToolCall{call}},
		batcher.Message{Role: "tool", ToolCallID: call.ID, Content: `{"temperature_c":21,"sky":"clear"}`})
	out, _, err = dispatch(context.Background(), be, 64, r2)
	if err != nil {
		t.Fatal(err)
	}
	if a := out[0]; a.Err != nil || a.FinishReason != batcher.FinishStop || a.Text == "" || len(a.ChatOutput().ToolCalls) != 0 {
		t.Fatalf("after the tool result: %+v; want a text answer", a)
	}
}

func testJSON(t *testing.T, target Target) {
	if !target.JSON {
		t.Skip("the backend declares no JSON output")
	}
	_, be := start(t, target, llmsim.Config{})
	r := chat("Give me JSON.")
	r.MutableChat().ResponseFormat = batcher.ResponseFormat{Type: batcher.FormatJSONObject}
	out, _, err := dispatch(context.Background(), be, 64, r)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid([]byte(out[0].Text)) {
		t.Errorf("json_object answer %q is not JSON", out[0].Text)
	}
}

// deltas collects a stream's deltas; cancel, when set, is called after
// the first.
type deltas struct {
	mu     sync.Mutex
	ds     []batcher.Delta
	cancel func()
}

func (d *deltas) WriteDelta(x *batcher.Delta) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := *x
	c.ToolCalls = append([]batcher.ToolCallDelta(nil), x.ToolCalls...)
	d.ds = append(d.ds, c)
	if d.cancel != nil {
		d.cancel()
	}
	return nil
}

func (d *deltas) text() string {
	var sb strings.Builder
	for _, x := range d.ds {
		sb.WriteString(x.Text)
	}
	return sb.String()
}

func streamer(t *testing.T, be batcher.Backend) batcher.Streamer {
	s, ok := be.(batcher.Streamer)
	if !ok {
		t.Fatal("the backend does not stream")
	}
	return s
}

func testStream(t *testing.T, target Target) {
	f, be := start(t, target, llmsim.Config{})
	r := chat("Stream me an answer, please.")
	out, _, err := dispatch(context.Background(), be, 64, r)
	if err != nil {
		t.Fatal(err)
	}
	var w deltas
	b := &batcher.Batch{ID: "s1", Route: "r", Model: Model, Op: batcher.OpChat, Requests: []*batcher.Request{r}, MaxTokens: 64}
	resp, err := streamer(t, be).Stream(context.Background(), b, &w)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.ds) < 2 {
		t.Errorf("%d deltas, want the answer in pieces", len(w.ds))
	}
	if got := w.text(); got != out[0].Text {
		t.Errorf("streamed %q, unstreamed %q", got, out[0].Text)
	}
	if resp.FinishReason != batcher.FinishStop || resp.Usage != out[0].Usage {
		t.Errorf("stream ended %v with usage %+v; want stop and %+v", resp.FinishReason, resp.Usage, out[0].Usage)
	}
	if st := f.sim.Stats(); st.Streams != 1 {
		t.Errorf("%d upstream streams, want 1", st.Streams)
	}
}

func testStreamToolCall(t *testing.T, target Target) {
	if !target.StreamsToolCalls {
		t.Skip("llmsim does not stream this dialect's tool calls")
	}
	_, be := start(t, target, llmsim.Config{})
	r := chat("What is the weather in Paris?")
	r.MutableChat().Tools = []batcher.Tool{weather}
	r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}
	out, _, err := dispatch(context.Background(), be, 64, r)
	if err != nil {
		t.Fatal(err)
	}
	var w deltas
	b := &batcher.Batch{ID: "s1", Route: "r", Model: Model, Op: batcher.OpChat, Requests: []*batcher.Request{r}, MaxTokens: 64}
	resp, err := streamer(t, be).Stream(context.Background(), b, &w)
	if err != nil {
		t.Fatal(err)
	}
	var id, name, args string
	for _, d := range w.ds {
		for _, c := range d.ToolCalls {
			if c.Index != 0 {
				t.Fatalf("tool call delta of index %d, want 0", c.Index)
			}
			id += c.ID
			name += c.Name
			args += c.Arguments
		}
	}
	want := out[0].ChatOutput().ToolCalls[0]
	if id != want.ID || name != want.Name || args != want.Arguments {
		t.Errorf("streamed call %s %s %s, unstreamed %+v", id, name, args, want)
	}
	if resp.FinishReason != batcher.FinishToolCalls {
		t.Errorf("finish %v, want tool calls", resp.FinishReason)
	}
}

func testRateLimitHeaders(t *testing.T, target Target) {
	_, be := start(t, target, llmsim.Config{RPM: 2, TPM: 100000})
	out, b, err := dispatch(context.Background(), be, 64, chat("one"))
	if err != nil || out[0].Err != nil {
		t.Fatal(err, out[0].Err)
	}
	rl := b.RateLimit
	if rl == nil || rl.LimitRequests != 2 || rl.RemainingRequests != 1 || rl.LimitTokens != 100000 ||
		rl.RemainingTokens < 0 || rl.RemainingTokens >= 100000 || rl.ResetRequests <= 0 {
		t.Fatalf("rate limit seen %+v; want 2 requests, 1 left, 100000 tokens, some spent, a reset", rl)
	}
	if _, _, err := dispatch(context.Background(), be, 64, chat("two")); err != nil {
		t.Fatal(err)
	}
	_, _, err = dispatch(context.Background(), be, 64, chat("three"))
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) || ue.Class != batcher.ClassRateLimit || ue.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third call: %v; want a 429 rate limit", err)
	}
	if ue.RateLimit == nil || ue.RateLimit.RetryAfter < time.Second || ue.RateLimit.RemainingRequests != 0 {
		t.Errorf("429's rate limit %+v; want retry-after of seconds and no request left", ue.RateLimit)
	}
}

// core returns a Batcher over be on route "r", retrying at once but for
// what the upstream asks.
func core(t *testing.T, be batcher.Backend) *batcher.Batcher {
	t.Helper()
	c, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be,
			Retry: batcher.RetryPolicy{MaxRetries: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}),
		batcher.WithRoute(batcher.Route{Name: "r", Op: batcher.OpChat, Backend: "be", Model: Model}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return c
}

func testRetryAfterHonoured(t *testing.T, target Target) {
	f, be := start(t, target, llmsim.Config{})
	f.push(scripted{status: http.StatusTooManyRequests, headers: map[string]string{"Retry-After": "1"}, message: "slow down"})
	res, err := core(t, be).Do(context.Background(), chat("Hello after a 429"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || f.calls.Load() != 2 {
		t.Fatalf("%d attempts, %d calls; want 2 each", res.Attempts, f.calls.Load())
	}
	first, second := <-f.arrived, <-f.arrived
	if gap := second.Sub(first); gap < time.Second {
		t.Errorf("retried %v after a 429 asking for 1s", gap)
	}
}

func testServerErrorsRetried(t *testing.T, target Target) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, 529} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			f, be := start(t, target, llmsim.Config{})
			f.push(scripted{status: status, message: "Overloaded"})
			res, err := core(t, be).Do(context.Background(), chat("Hello after a "+strconv.Itoa(status)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != 2 || f.calls.Load() != 2 {
				t.Errorf("%d attempts, %d calls; want 2 each", res.Attempts, f.calls.Load())
			}
		})
	}
	// llmsim's own server errors (500, 502, 503; 529 for Anthropic) are
	// server errors.
	_, be := start(t, target, llmsim.Config{ErrorRate: 1})
	_, _, err := dispatch(context.Background(), be, 64, chat("x"))
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) || ue.Class != batcher.ClassServer {
		t.Errorf("llmsim's fault: %v; want a server error", err)
	}
}

func testBadRequestNotRetried(t *testing.T, target Target) {
	f, be := start(t, target, llmsim.Config{})
	f.push(scripted{status: http.StatusBadRequest, message: "messages.0: the llama is not a valid role"})
	res, err := core(t, be).Do(context.Background(), chat("Hello"))
	if err == nil {
		t.Fatal("a 400 succeeded")
	}
	if res.Attempts != 1 || f.calls.Load() != 1 {
		t.Errorf("%d attempts, %d calls; want 1 each: a 400 is not retried", res.Attempts, f.calls.Load())
	}
	if !strings.Contains(err.Error(), "the llama is not a valid role") {
		t.Errorf("error %q does not carry the provider's message", err)
	}
}

func testBadRequestMessage(t *testing.T, target Target) {
	_, be := start(t, target, llmsim.Config{})
	r := chat("Hot take?")
	temp := float32(2.5)
	r.Params.Temperature = &temp
	_, _, err := dispatch(context.Background(), be, 64, r)
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) || ue.Class != batcher.ClassInvalidRequest || ue.StatusCode != http.StatusBadRequest {
		t.Fatalf("temperature 2.5: %v; want a 400 invalid request", err)
	}
	if !strings.Contains(ue.Message, "temperature") {
		t.Errorf("message %q does not name temperature", ue.Message)
	}
}

func testUnknownModel(t *testing.T, target Target) {
	_, be := start(t, target, llmsim.Config{Models: []string{"another-model"}})
	_, _, err := dispatch(context.Background(), be, 64, chat("Hello"))
	if c := batcher.ClassOf(err); c != batcher.ClassNotFound {
		t.Errorf("unknown model: %v (class %v); want not found", err, c)
	}
}

func testCancelClosesCall(t *testing.T, target Target) {
	f, be := start(t, target, llmsim.Config{Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := dispatch(ctx, be, 64, chat("never answered"))
		done <- err
	}()
	<-f.arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled dispatch: %v; want context.Canceled", err)
	}
	<-f.gone // the upstream saw its client leave
}

func testCancelClosesStream(t *testing.T, target Target) {
	f, be := start(t, target, llmsim.Config{StreamStallRate: 1})
	ctx, cancel := context.WithCancel(context.Background())
	w := &deltas{cancel: cancel}
	r := chat("A stream that stalls after its first word, cancelled then.")
	b := &batcher.Batch{ID: "s1", Route: "r", Model: Model, Op: batcher.OpChat, Requests: []*batcher.Request{r}, MaxTokens: 64}
	_, err := streamer(t, be).Stream(ctx, b, w)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled stream: %v; want context.Canceled", err)
	}
	<-f.gone
}
