package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// Tests that run requests end to end: core, openai backend, HTTP on
// loopback, llmsim or a small httptest server.

// fullBatch makes a route's batches go out exactly when n requests are in.
func fullBatch(n int) batcher.BatchConfig {
	return batcher.BatchConfig{MaxBatchSize: n, MinBatchSize: n, Window: 10 * time.Second, MaxWait: 10 * time.Second}
}

func TestEmbeddingsNativeBatchOf100(t *testing.T) {
	sim, url := startSim(t, llmsim.Config{EmbeddingDim: 16})
	be := newBackend(t, openai.Config{BaseURL: url})
	core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be}}, []batcher.Route{{
		Name: "text-embedding-3-small", Op: batcher.OpEmbedding, Backend: "openai-main", Model: "sim-embedding", Batch: fullBatch(100),
	}})
	reqs := make([]*batcher.Request, 100)
	for i := range reqs {
		reqs[i] = embedding("text-embedding-3-small", fmt.Sprintf("document %d: %s", i, strings.Repeat("x", i)))
	}
	var tokens int64
	for i, res := range doAll(t, core, reqs) {
		if res.Err != nil {
			t.Fatalf("request %d: %v", i, res.Err)
		}
		if want := llmsim.Embedding(reqs[i].Input.Text, 16); !equal(res.Embedding, want) {
			t.Fatalf("request %d got another input's embedding", i)
		}
		if res.BatchSize != 100 || res.Backend != "openai-main" {
			t.Fatalf("request %d: batch size %d, backend %q", i, res.BatchSize, res.Backend)
		}
		tokens += int64(res.Usage.PromptTokens)
	}
	st := sim.Stats()
	if st.Embeddings != 1 || st.Inputs != 100 || be.Stats().Calls != 1 {
		t.Fatalf("upstream calls: sim %+v, backend %+v; want one call carrying 100 inputs", st, be.Stats())
	}
	if tokens != st.PromptTokens {
		t.Fatalf("usage shares add up to %d, upstream counted %d", tokens, st.PromptTokens)
	}
}

func TestCompletionsNativeBatch(t *testing.T) {
	sim, url := startSim(t, llmsim.Config{})
	be := newBackend(t, openai.Config{BaseURL: url})
	core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be}}, []batcher.Route{{
		Name: "gpt-3.5-turbo-instruct", Op: batcher.OpCompletion, Backend: "openai-main", Model: "sim-completion", Batch: fullBatch(5),
	}})
	reqs := make([]*batcher.Request, 5)
	for i := range reqs {
		reqs[i] = completion("gpt-3.5-turbo-instruct", fmt.Sprintf("Once upon a time, story %d,", i))
		reqs[i].Params.MaxTokens = 12
	}
	var prompt, compl int64
	for i, res := range doAll(t, core, reqs) {
		want, cut := llmsim.Reply(reqs[i].Input.Prompt, 12, llmsim.DefaultReplyTokens)
		if res.Err != nil || res.Text != want {
			t.Fatalf("request %d: %q, %v; want %q", i, res.Text, res.Err, want)
		}
		if wantFR := map[bool]batcher.FinishReason{true: batcher.FinishLength, false: batcher.FinishStop}[cut]; res.FinishReason != wantFR {
			t.Fatalf("request %d: finish %v, want %v", i, res.FinishReason, wantFR)
		}
		prompt += int64(res.Usage.PromptTokens)
		compl += int64(res.Usage.CompletionTokens)
	}
	st := sim.Stats()
	if st.Completions != 1 || st.Inputs != 5 {
		t.Fatalf("stats %+v: want one call carrying 5 prompts", st)
	}
	if prompt != st.PromptTokens || compl != st.CompletionTokens {
		t.Fatalf("usage %d+%d, upstream counted %d+%d", prompt, compl, st.PromptTokens, st.CompletionTokens)
	}
}

func TestChatFanOut(t *testing.T) {
	sim, url := startSim(t, llmsim.Config{Latency: 20 * time.Millisecond})
	be := newBackend(t, openai.Config{BaseURL: url, MaxFanOut: 3})
	core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be}}, []batcher.Route{{
		Name: "gpt-4o-mini", Op: batcher.OpChat, Backend: "openai-main", Model: "sim-chat", Batch: fullBatch(8),
	}})
	reqs := make([]*batcher.Request, 8)
	for i := range reqs {
		reqs[i] = chat("gpt-4o-mini", fmt.Sprintf("Question %d: why is the sky blue?", i))
	}
	for i, res := range doAll(t, core, reqs) {
		user := reqs[i].Input.Messages[0].Content
		want, _ := llmsim.Reply(user, int(batcher.DefaultMaxTokens), llmsim.DefaultReplyTokens)
		if res.Err != nil || res.Text != want || res.FinishReason != batcher.FinishStop {
			t.Fatalf("request %d: %+v; want %q", i, res, want)
		}
		if wantPrompt := int32(3 + llmsim.Tokens(user) + 4); res.Usage.PromptTokens != wantPrompt || res.Usage.CompletionTokens != int32(llmsim.Tokens(want)) {
			t.Fatalf("request %d usage %+v", i, res.Usage)
		}
		if res.BatchSize != 8 {
			t.Fatalf("batch size %d", res.BatchSize)
		}
	}
	if st := sim.Stats(); st.Chat != 8 || st.MaxInFlight > 3 {
		t.Fatalf("stats %+v: want 8 calls, at most 3 at once", st)
	}
}

// packedSetup runs n chat requests sharing a system prompt through a
// packing backend, MaxItems per pack, in one batch.
func packedSetup(t *testing.T, simCfg llmsim.Config, pack openai.PackConfig, n int) (*llmsim.Server, *openai.Backend, []*batcher.Request, []batcher.Result) {
	t.Helper()
	sim, url := startSim(t, simCfg)
	pack.Enabled = true
	be := newBackend(t, openai.Config{BaseURL: url, Pack: pack})
	core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be}}, []batcher.Route{{
		Name: "gpt-4o-mini", Op: batcher.OpChat, Backend: "openai-main", Model: "sim-chat", Batch: fullBatch(n), DefaultMaxTokens: 64,
	}})
	reqs := make([]*batcher.Request, n)
	for i := range reqs {
		reqs[i] = chat("gpt-4o-mini", fmt.Sprintf("Short question %d?", i), "Answer in one line.")
	}
	return sim, be, reqs, doAll(t, core, reqs)
}

// checkAnswers checks that every request got the answer llmsim gives its
// prompt alone, and that the usage shares add up to the upstream's count.
func checkAnswers(t *testing.T, sim *llmsim.Server, reqs []*batcher.Request, results []batcher.Result) {
	t.Helper()
	var tokens int64
	for i, res := range results {
		user := reqs[i].Input.Messages[len(reqs[i].Input.Messages)-1].Content
		want, _ := llmsim.Reply(user, 64, llmsim.DefaultReplyTokens)
		if res.Err != nil || res.Text != want {
			t.Fatalf("request %d: %q, %v; want %q", i, res.Text, res.Err, want)
		}
		if res.Usage.Total() <= 0 {
			t.Fatalf("request %d has no usage", i)
		}
		tokens += int64(res.Usage.Total())
	}
	if st := sim.Stats(); tokens != st.PromptTokens+st.CompletionTokens {
		t.Fatalf("usage shares add up to %d, upstream counted %d", tokens, st.PromptTokens+st.CompletionTokens)
	}
}

func TestPackedChatRoundTrip(t *testing.T) {
	sim, be, reqs, results := packedSetup(t, llmsim.Config{}, openai.PackConfig{MaxItems: 4}, 8)
	checkAnswers(t, sim, reqs, results)
	if st := sim.Stats(); st.Chat != 2 || st.Packed != 2 || st.PackedItems != 8 {
		t.Fatalf("sim %+v: want 2 packed calls of 4", st)
	}
	if st := be.Stats(); st.Packs != 2 || st.Resent != 0 || st.Calls != 2 {
		t.Fatalf("backend %+v", st)
	}
}

func TestPackedChatPartialFailureResendsSingly(t *testing.T) {
	sim, be, reqs, results := packedSetup(t, llmsim.Config{PackMissingRate: 0.25, PackMalformedRate: 0.25, Seed: 11},
		openai.PackConfig{MaxItems: 10}, 10)
	checkAnswers(t, sim, reqs, results)
	bs, ss := be.Stats(), sim.Stats()
	if bs.Packs != 1 || bs.Resent == 0 || bs.Resent == 10 {
		t.Fatalf("backend %+v: want one pack with some items re-sent (seed 11)", bs)
	}
	if ss.Chat != 1+bs.Resent || ss.Packed != 1 {
		t.Fatalf("sim %+v: want the pack plus %d single calls", ss, bs.Resent)
	}
}

func TestPackedChatUnparseableResendsAll(t *testing.T) {
	sim, be, reqs, results := packedSetup(t, llmsim.Config{PackUnparseableRate: 1}, openai.PackConfig{}, 6)
	checkAnswers(t, sim, reqs, results)
	if bs := be.Stats(); bs.Packs != 1 || bs.Resent != 6 || sim.Stats().Chat != 7 {
		t.Fatalf("backend %+v sim %+v", bs, sim.Stats())
	}
}

func TestPackCaps(t *testing.T) {
	// MaxTokens fits two items of (5+1)+64+16 tokens after the prompt's 100.
	sim, be, reqs, results := packedSetup(t, llmsim.Config{}, openai.PackConfig{MaxItems: 10, MaxTokens: 280}, 6)
	checkAnswers(t, sim, reqs, results)
	if bs := be.Stats(); bs.Packs != 3 || bs.PackedItems != 6 {
		t.Fatalf("backend %+v: want 3 packs of 2", bs)
	}
}

func TestPackOnlyOptedInRoutes(t *testing.T) {
	sim, be, reqs, results := packedSetup(t, llmsim.Config{}, openai.PackConfig{Routes: []string{"another-route"}}, 4)
	checkAnswers(t, sim, reqs, results)
	if be.Stats().Packs != 0 || sim.Stats().Chat != 4 {
		t.Fatalf("a route that did not opt in was packed: %+v", be.Stats())
	}
}

func TestPackRejectedByUpstreamResendsSingly(t *testing.T) {
	// An upstream without structured output rejects response_format.
	var mu sync.Mutex
	var formats []bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ResponseFormat json.RawMessage `json:"response_format"`
			Messages       []struct{ Content string }
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		formats = append(formats, req.ResponseFormat != nil)
		mu.Unlock()
		if req.ResponseFormat != nil {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"response_format json_schema is not supported","type":"invalid_request_error"}}`)
			return
		}
		_, _ = fmt.Fprintf(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
			"re: "+req.Messages[len(req.Messages)-1].Content)
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL, Pack: openai.PackConfig{Enabled: true}})
	out, _, err := dispatch(context.Background(), be, "r", "m", 32, chat("r", "one"), chat("r", "two"), chat("r", "three"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"re: one", "re: two", "re: three"} {
		if out[i].Err != nil || out[i].Text != want || out[i].Usage != (batcher.Usage{PromptTokens: 5, CompletionTokens: 2}) {
			t.Fatalf("response %d = %+v", i, out[i])
		}
	}
	if len(formats) != 4 || !formats[0] || formats[1] || formats[2] || formats[3] {
		t.Fatalf("calls with response_format: %v; want the pack, then three singles without", formats)
	}
}

func TestPackRateLimitedIsNotResent(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL, Pack: openai.PackConfig{Enabled: true}})
	out, _, err := dispatch(context.Background(), be, "r", "m", 32, chat("r", "one"), chat("r", "two"))
	if batcher.ClassOf(err) != batcher.ClassRateLimit || n.Load() != 1 {
		t.Fatalf("err %v after %d calls; want a rate limit after the one packed call", err, n.Load())
	}
	for i := range out {
		if batcher.ClassOf(out[i].Err) != batcher.ClassRateLimit {
			t.Fatalf("response %d = %+v", i, out[i])
		}
	}
}

// TestRateLimitHeadersSlowTheDispatcher: an upstream that says its request
// budget is spent until a reset makes the core hold the next batch until
// then; a 429's Retry-After does the same for the retry.
func TestRateLimitHeadersSlowTheDispatcher(t *testing.T) {
	const reset = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		first func(w http.ResponseWriter)
	}{
		{"remaining zero", func(w http.ResponseWriter) {
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "300ms")
			_, _ = io.WriteString(w, `{"data":[{"index":0,"embedding":[1]}],"usage":{"prompt_tokens":1}}`)
		}},
		{"429 retry-after-ms", func(w http.ResponseWriter) {
			w.Header().Set("retry-after-ms", "300")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var times []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				times = append(times, time.Now())
				first := len(times) == 1
				mu.Unlock()
				if first {
					tc.first(w)
					return
				}
				_, _ = io.WriteString(w, `{"data":[{"index":0,"embedding":[2]}],"usage":{"prompt_tokens":1}}`)
			}))
			defer srv.Close()
			be := newBackend(t, openai.Config{BaseURL: srv.URL})
			core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be,
				Retry: batcher.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}},
				[]batcher.Route{{Name: "emb", Op: batcher.OpEmbedding, Backend: "openai-main", Batch: fullBatch(1)}})
			for i := range 2 {
				if _, err := core.Do(context.Background(), embedding("emb", "x")); err != nil && (i == 1 || tc.name == "remaining zero") {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(times) < 2 {
				t.Fatalf("%d upstream calls", len(times))
			}
			if gap := times[1].Sub(times[0]); gap < reset {
				t.Fatalf("second call came %v after the first; the upstream asked for %v", gap, reset)
			}
			st := core.Stats()[0]
			if tc.name == "remaining zero" && st.Waits["rate_limit_pause"] == 0 {
				t.Fatalf("core stats %+v: no wait on the rate-limit pause", st)
			}
			if tc.name != "remaining zero" && (st.RateLimited != 1 || st.Retries["rate_limit"] != 1) {
				t.Fatalf("core stats %+v: want the 429 seen and retried once", st)
			}
		})
	}
}

func TestFallbackToSecondBackend(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"overloaded"}}`)
	}))
	defer down.Close()
	sim, url := startSim(t, llmsim.Config{})
	main := newBackend(t, openai.Config{BaseURL: down.URL})
	local := newBackend(t, openai.Config{BaseURL: url})
	fast := batcher.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	core := newCore(t, []batcher.BackendConfig{
		{Name: "openai-main", Backend: main, Retry: fast, Breaker: batcher.BreakerConfig{Consecutive: 1, Cooldown: time.Minute}},
		{Name: "ollama-local", Backend: local, Retry: fast},
	}, []batcher.Route{{
		Name: "gpt-4o-mini", Op: batcher.OpChat, Backend: "openai-main", Model: "gpt-4o-mini", Batch: fullBatch(1),
		Fallbacks: []batcher.Target{{Backend: "ollama-local", Model: "sim-chat"}},
	}})
	res, err := core.Do(context.Background(), chat("gpt-4o-mini", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := llmsim.Reply("hello", int(batcher.DefaultMaxTokens), llmsim.DefaultReplyTokens)
	if res.Backend != "ollama-local" || res.Text != want || res.Attempts < 2 {
		t.Fatalf("result %+v; want the fallback's answer after the main backend failed", res)
	}
	if main.Stats().Calls != 1 || sim.Stats().Chat != 1 {
		t.Fatalf("main %+v, fallback %+v", main.Stats(), sim.Stats())
	}
}

func TestTracePropagation(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	var mu sync.Mutex
	var parents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL, TracerProvider: tp})
	core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be}},
		[]batcher.Route{{Name: "gpt-4o-mini", Op: batcher.OpChat, Backend: "openai-main", Batch: fullBatch(2)}},
		batcher.WithTracerProvider(tp))
	doAll(t, core, []*batcher.Request{chat("gpt-4o-mini", "a"), chat("gpt-4o-mini", "b")})

	var batchSpan sdktrace.ReadOnlySpan
	var clients []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		switch {
		case strings.HasPrefix(s.Name(), "batcher.batch"):
			batchSpan = s
		case strings.HasPrefix(s.Name(), "openai POST"):
			clients = append(clients, s)
		}
	}
	if batchSpan == nil || len(clients) != 2 || len(parents) != 2 {
		t.Fatalf("batch span %v, %d client spans, %d calls", batchSpan, len(clients), len(parents))
	}
	sent := map[string]bool{}
	for _, p := range parents {
		sent[p] = true
	}
	for _, c := range clients {
		if c.SpanKind() != trace.SpanKindClient || c.Parent().SpanID() != batchSpan.SpanContext().SpanID() || c.SpanContext().TraceID() != batchSpan.SpanContext().TraceID() {
			t.Fatalf("client span %s is not a child of the batch span", c.Name())
		}
		want := fmt.Sprintf("00-%s-%s-01", c.SpanContext().TraceID(), c.SpanContext().SpanID())
		if !sent[want] {
			t.Fatalf("no call carried traceparent %s; got %v", want, parents)
		}
	}
}
