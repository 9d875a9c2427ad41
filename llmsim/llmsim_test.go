package llmsim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/backend/openai/pack"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves a simulator with cfg on a loopback port until the test ends.
func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return s, ts.URL
}

func post(t *testing.T, url string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := tryPost(context.Background(), url, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func tryPost(ctx context.Context, url string, body any, hdr ...string) (*http.Response, []byte, error) {
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

type msg = map[string]any

func chatBody(model string, maxTokens int, msgs ...string) msg {
	var m []msg
	for i := 0; i+1 < len(msgs); i += 2 {
		m = append(m, msg{"role": msgs[i], "content": msgs[i+1]})
	}
	b := msg{"model": model, "messages": m}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
	}
	return b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestChatDeterministic(t *testing.T) {
	s, url := start(t, Config{})
	var first string
	for range 2 {
		resp, b := post(t, url+"/v1/chat/completions", chatBody("sim-chat", 0, "system", "Be brief.", "user", "What is Go?"))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		r := decode[chatResponse](t, b)
		want, _ := Reply("What is Go?", DefaultReplyTokens, DefaultReplyTokens)
		if r.Choices[0].Message.Content != want || r.Choices[0].FinishReason != "stop" {
			t.Fatalf("reply %+v, want %q", r.Choices[0], want)
		}
		if !strings.HasPrefix(want, "echo: What is Go? |") {
			t.Fatalf("reply %q does not echo the prompt", want)
		}
		wantPrompt := 3 + Tokens("Be brief.") + 4 + Tokens("What is Go?") + 4
		if r.Usage.PromptTokens != wantPrompt || r.Usage.CompletionTokens != Tokens(want) || r.Usage.TotalTokens != wantPrompt+Tokens(want) {
			t.Fatalf("usage %+v, want prompt %d completion %d", r.Usage, wantPrompt, Tokens(want))
		}
		if first != "" && first != want {
			t.Fatal("not deterministic")
		}
		first = want
	}
	if st := s.Stats(); st.Chat != 2 || st.OK != 2 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestChatMaxTokensCuts(t *testing.T) {
	_, url := start(t, Config{})
	_, b := post(t, url+"/v1/chat/completions", chatBody("sim-chat", 3, "user", "Tell me a long story"))
	r := decode[chatResponse](t, b)
	if c := r.Choices[0]; c.FinishReason != "length" || len(c.Message.Content) > 12 || r.Usage.CompletionTokens != 3 {
		t.Fatalf("choice %+v usage %+v", c, r.Usage)
	}
	full, _ := Reply("Tell me a long story", 100, DefaultReplyTokens)
	if !strings.HasPrefix(full, r.Choices[0].Message.Content) {
		t.Fatal("a cut reply is not a prefix of the full one")
	}
}

func TestChatContentParts(t *testing.T) {
	_, url := start(t, Config{})
	body := msg{"model": "sim-chat", "messages": []msg{{"role": "user", "content": []msg{{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}}}}}
	resp, b := post(t, url+"/v1/chat/completions", body)
	want, _ := Reply("hello", DefaultReplyTokens, DefaultReplyTokens)
	if resp.StatusCode != http.StatusOK || decode[chatResponse](t, b).Choices[0].Message.Content != want {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

func TestCompletionsBatch(t *testing.T) {
	s, url := start(t, Config{})
	prompts := []string{"one", "two", "three"}
	_, b := post(t, url+"/v1/completions", msg{"model": "sim-completion", "prompt": prompts, "max_tokens": 50})
	r := decode[completionResponse](t, b)
	if len(r.Choices) != 3 {
		t.Fatalf("choices %+v", r.Choices)
	}
	total := 0
	for i, c := range r.Choices {
		want, _ := Reply(prompts[c.Index], 50, DefaultReplyTokens)
		if c.Index != i || c.Text != want {
			t.Fatalf("choice %d = %+v, want %q", i, c, want)
		}
		total += Tokens(c.Text)
	}
	if r.Usage.CompletionTokens != total || r.Usage.PromptTokens != Tokens("one")+Tokens("two")+Tokens("three") {
		t.Fatalf("usage %+v", r.Usage)
	}
	if st := s.Stats(); st.Inputs != 3 || st.CompletionTokens != int64(total) {
		t.Fatalf("stats %+v", st)
	}
	// A single string prompt works too.
	_, b = post(t, url+"/v1/completions", msg{"model": "sim-completion", "prompt": "solo"})
	if r := decode[completionResponse](t, b); len(r.Choices) != 1 {
		t.Fatalf("%s", b)
	}
}

func TestEmbeddings(t *testing.T) {
	_, url := start(t, Config{EmbeddingDim: 8})
	inputs := []string{"alpha", "beta", "gamma"}
	_, b := post(t, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": inputs})
	r := decode[embeddingResponse](t, b)
	for i, d := range r.Data {
		want := Embedding(inputs[d.Index], 8)
		if d.Index != i || !equal(d.Embedding, want) {
			t.Fatalf("data %d = %+v, want %v", i, d, want)
		}
		var norm float64
		for _, x := range d.Embedding {
			norm += float64(x) * float64(x)
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Fatalf("embedding %d has norm² %v", i, norm)
		}
	}
	if equal(r.Data[0].Embedding, r.Data[1].Embedding) {
		t.Fatal("different inputs share an embedding")
	}

	_, b = post(t, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": "alpha", "encoding_format": "base64", "dimensions": 4})
	var r64 struct {
		Data []struct{ Embedding string }
	}
	if err := json.Unmarshal(b, &r64); err != nil || len(r64.Data) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
	raw, err := base64.StdEncoding.DecodeString(r64.Data[0].Embedding)
	if err != nil || len(raw) != 16 {
		t.Fatalf("base64 embedding: %v, %d bytes", err, len(raw))
	}
	want := Embedding("alpha", 4)
	for i := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want[i] {
			t.Fatalf("value %d = %v, want %v", i, got, want[i])
		}
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestModels(t *testing.T) {
	_, url := start(t, Config{Models: []string{"m1", "m2"}})
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	l := decode[modelList](t, b)
	if len(l.Data) != 2 || l.Data[0].ID != "m1" || l.Data[1].ID != "m2" {
		t.Fatalf("%s", b)
	}
	resp, err = http.Get(url + "/v1/models/m3")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: status %d", resp.StatusCode)
	}
}

func TestRequestErrors(t *testing.T) {
	_, url := start(t, Config{APIKey: "sk-test"})
	auth := []string{"Authorization", "Bearer sk-test"}
	tests := []struct {
		name   string
		path   string
		body   any
		hdr    []string
		status int
		code   string
	}{
		{"no key", "/v1/chat/completions", chatBody("sim-chat", 0, "user", "hi"), nil, 401, "invalid_api_key"},
		{"wrong key", "/v1/chat/completions", chatBody("sim-chat", 0, "user", "hi"), []string{"Authorization", "Bearer sk-nope"}, 401, "invalid_api_key"},
		{"unknown model", "/v1/chat/completions", chatBody("gpt-9", 0, "user", "hi"), auth, 404, "model_not_found"},
		{"bad json", "/v1/chat/completions", "{not json", auth, 400, ""},
		{"no messages", "/v1/chat/completions", msg{"model": "sim-chat"}, auth, 400, ""},
		{"bad role", "/v1/chat/completions", chatBody("sim-chat", 0, "wizard", "hi"), auth, 400, ""},
		{"stream two prompts", "/v1/completions", msg{"model": "sim-chat", "stream": true, "prompt": []string{"x", "y"}}, auth, 400, ""},
		{"zero max tokens", "/v1/completions", msg{"model": "sim-chat", "prompt": "x", "max_tokens": 0}, auth, 400, ""},
		{"token prompt", "/v1/completions", msg{"model": "sim-chat", "prompt": []int{1, 2}}, auth, 400, ""},
		{"empty input", "/v1/embeddings", msg{"model": "sim-embedding", "input": []string{"a", ""}}, auth, 400, ""},
		{"too many inputs", "/v1/embeddings", msg{"model": "sim-embedding", "input": make([]string, MaxInputs+1)}, auth, 400, ""},
		{"unknown path", "/v1/images", msg{}, auth, 404, "unknown_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := post(t, url+tt.path, tt.body, tt.hdr...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			e := decode[errorBody](t, b)
			if e.Error.Message == "" || (tt.code != "" && (e.Error.Code == nil || *e.Error.Code != tt.code)) {
				t.Fatalf("error body %s, want code %q", b, tt.code)
			}
			if strings.Contains(string(b), "sk-") {
				t.Fatalf("error body echoes a key: %s", b)
			}
		})
	}
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestRPMLimit(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	_, url := start(t, Config{RPM: 2, Now: clk.now})
	body := chatBody("sim-chat", 0, "user", "hi")
	for i, want := range []string{"1", "0"} {
		resp, b := post(t, url+"/v1/chat/completions", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
		h := resp.Header
		if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != want {
			t.Fatalf("call %d headers %v", i, h)
		}
	}
	resp, b := post(t, url+"/v1/chat/completions", body)
	h := resp.Header
	if resp.StatusCode != http.StatusTooManyRequests || h.Get("Retry-After") != "30" || h.Get("retry-after-ms") != "30000" ||
		h.Get("x-ratelimit-remaining-requests") != "0" || h.Get("x-ratelimit-reset-requests") != "1m0s" {
		t.Fatalf("throttled call: %d %v %s", resp.StatusCode, h, b)
	}
	if e := decode[errorBody](t, b); e.Error.Type != "requests" || *e.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("body %s", b)
	}
	clk.add(30 * time.Second)
	if resp, b := post(t, url+"/v1/chat/completions", body); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the wait: %d %s", resp.StatusCode, b)
	}
}

func TestTPMLimit(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	s, url := start(t, Config{TPM: 600, Now: clk.now})
	// Cost: prompt tokens (2 each) of 100 inputs.
	inputs := make([]string, 100)
	for i := range inputs {
		inputs[i] = "abcdefgh"
	}
	for i := range 3 {
		resp, b := post(t, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": inputs})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, _ := post(t, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": inputs})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("x-ratelimit-remaining-tokens") != "0" || resp.Header.Get("retry-after-ms") != "20000" {
		t.Fatalf("throttled call: %d %v", resp.StatusCode, resp.Header)
	}
	// More than the whole TPM can never pass: no Retry-After.
	big := make([]string, 400)
	for i := range big {
		big[i] = "abcdefgh"
	}
	clk.add(time.Hour)
	resp, b := post(t, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": big})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" || !strings.Contains(string(b), "too large") {
		t.Fatalf("too large: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if st := s.Stats(); st.RateLimited != 2 || st.OK != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFaultServerError(t *testing.T) {
	s, url := start(t, Config{ErrorRate: 1})
	resp, b := post(t, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": "x"})
	if resp.StatusCode < 500 || decode[errorBody](t, b).Error.Type != "server_error" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if s.Stats().Errors != 1 {
		t.Fatal("fault not counted")
	}
}

func TestFaultReset(t *testing.T) {
	s, url := start(t, Config{ResetRate: 1})
	_, _, err := tryPost(context.Background(), url+"/v1/embeddings", msg{"model": "sim-embedding", "input": "x"})
	if err == nil {
		t.Fatal("call over a reset connection succeeded")
	}
	if s.Stats().Resets == 0 {
		t.Fatal("fault not counted")
	}
}

func TestFaultMalformed(t *testing.T) {
	s, url := start(t, Config{MalformedRate: 1, Seed: 7})
	seen := map[string]bool{}
	for range 8 {
		resp, b := post(t, url+"/v1/completions", msg{"model": "sim-chat", "prompt": "x"})
		if resp.StatusCode != http.StatusOK || json.Valid(b) {
			t.Fatalf("%d %s: want 200 with a broken body", resp.StatusCode, b)
		}
		seen[resp.Header.Get("Content-Type")] = true
	}
	if !seen["text/html"] || !seen["application/json"] || s.Stats().Malformed != 8 {
		t.Fatalf("kinds %v, stats %+v", seen, s.Stats())
	}
}

// signal is a slog handler that reports each record's message.
type signal struct{ ch chan string }

func (h signal) Enabled(context.Context, slog.Level) bool { return true }
func (h signal) Handle(_ context.Context, r slog.Record) error {
	h.ch <- r.Message
	return nil
}
func (h signal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signal) WithGroup(string) slog.Handler      { return h }

// The client gives up once the server hangs (its log says so), not after
// a fixed 50 ms: on a loaded machine that deadline could end before the
// request reached the handler, or the client return before the handler
// counted the fault.
func TestFaultTimeoutHangsUntilClientGivesUp(t *testing.T) {
	logs := signal{ch: make(chan string, 1)}
	s, url := start(t, Config{TimeoutRate: 1, Logger: slog.New(logs)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, _, err := tryPost(ctx, url+"/v1/embeddings", msg{"model": "sim-embedding", "input": "x"})
		errc <- err
	}()
	if m := <-logs.ch; m != "fault: hang" {
		t.Fatalf("log %q", m)
	}
	select {
	case err := <-errc:
		t.Fatalf("the call ended while the server hangs: %v", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the client's cancel", err)
	}
	if s.Stats().Timeouts != 1 {
		t.Fatal("fault not counted")
	}
}

func TestCloseReleasesHungCalls(t *testing.T) {
	logs := signal{ch: make(chan string, 1)}
	s, url := start(t, Config{TimeoutRate: 1, Logger: slog.New(logs)})
	errc := make(chan error, 1)
	go func() {
		_, _, err := tryPost(context.Background(), url+"/v1/embeddings", msg{"model": "sim-embedding", "input": "x"})
		errc <- err
	}()
	if m := <-logs.ch; m != "fault: hang" {
		t.Fatalf("log %q", m)
	}
	s.Close()
	if err := <-errc; err == nil {
		t.Fatal("hung call succeeded after Close")
	}
}

func TestMaxConcurrency(t *testing.T) {
	s, url := start(t, Config{MaxConcurrency: 2, Latency: 5 * time.Millisecond})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, b, err := tryPost(context.Background(), url+"/v1/embeddings", msg{"model": "sim-embedding", "input": "x"})
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("%v %s", err, b)
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.MaxInFlight > 2 || st.MaxInFlight < 1 || st.OK != 8 {
		t.Fatalf("stats %+v", st)
	}
}

func packedBody(t *testing.T, items []string, budget, maxTokens int) msg {
	t.Helper()
	p, err := pack.Build("Be brief.", items, budget)
	if err != nil {
		t.Fatal(err)
	}
	return chatBody("sim-chat", maxTokens, "system", p.System, "user", p.User)
}

func packedReply(t *testing.T, url string, body msg) chatResponse {
	t.Helper()
	resp, b := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	return decode[chatResponse](t, b)
}

func TestPackedAnswersMatchSingleCalls(t *testing.T) {
	s, url := start(t, Config{})
	items := []string{"What is 1+1?", "Name a fruit.", "line\nbreak \"quoted\""}
	r := packedReply(t, url, packedBody(t, items, 10, 200))
	answers, err := pack.Parse(r.Choices[0].Message.Content, len(items))
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range answers {
		single := packedReply(t, url, chatBody("sim-chat", 10, "user", items[i]))
		if a.Err != nil || a.Text != single.Choices[0].Message.Content {
			t.Fatalf("item %d: %+v, single call says %q", i+1, a, single.Choices[0].Message.Content)
		}
	}
	if st := s.Stats(); st.Packed != 1 || st.PackedItems != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPackedFaults(t *testing.T) {
	items := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	t.Run("missing", func(t *testing.T) {
		_, url := start(t, Config{PackMissingRate: 1})
		answers, err := pack.Parse(packedReply(t, url, packedBody(t, items, 10, 500)).Choices[0].Message.Content, len(items))
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range answers {
			if !errors.Is(a.Err, pack.ErrMissing) {
				t.Fatalf("item %d: %+v", i+1, a)
			}
		}
	})
	t.Run("malformed", func(t *testing.T) {
		_, url := start(t, Config{PackMalformedRate: 1})
		answers, err := pack.Parse(packedReply(t, url, packedBody(t, items, 10, 500)).Choices[0].Message.Content, len(items))
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range answers {
			if !errors.Is(a.Err, pack.ErrMalformed) {
				t.Fatalf("item %d: %+v", i+1, a)
			}
		}
	})
	t.Run("unparseable", func(t *testing.T) {
		_, url := start(t, Config{PackUnparseableRate: 1})
		if _, err := pack.Parse(packedReply(t, url, packedBody(t, items, 10, 500)).Choices[0].Message.Content, len(items)); !errors.Is(err, pack.ErrUnparseable) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("partial", func(t *testing.T) {
		_, url := start(t, Config{PackMissingRate: 0.3, PackMalformedRate: 0.3, Seed: 3})
		answers, err := pack.Parse(packedReply(t, url, packedBody(t, items, 10, 500)).Choices[0].Message.Content, len(items))
		if err != nil {
			t.Fatal(err)
		}
		good, bad := 0, 0
		for i, a := range answers {
			if a.Err != nil {
				bad++
				continue
			}
			good++
			if want, _ := Reply(items[i], 10, DefaultReplyTokens); a.Text != want {
				t.Fatalf("item %d = %q, want %q", i+1, a.Text, want)
			}
		}
		if good == 0 || bad == 0 {
			t.Fatalf("good %d bad %d: want some of each with seed 3", good, bad)
		}
	})
	t.Run("cut by max_tokens", func(t *testing.T) {
		_, url := start(t, Config{})
		r := packedReply(t, url, packedBody(t, items, 10, 40))
		if r.Choices[0].FinishReason != "length" {
			t.Fatalf("finish %q", r.Choices[0].FinishReason)
		}
		answers, err := pack.Parse(r.Choices[0].Message.Content, len(items))
		if err != nil {
			t.Fatal(err)
		}
		if answers[0].Err != nil || answers[len(items)-1].Err == nil {
			t.Fatalf("want the first answer kept and the last lost: %+v", answers)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Models: []string{""}}, "models[0]"},
		{Config{Latency: -1}, "latency"},
		{Config{RPM: -1}, "rpm"},
		{Config{ReplyTokens: -1}, "reply tokens"},
		{Config{EmbeddingDim: 1 << 20}, "embedding dim"},
		{Config{ErrorRate: 1.5}, "error rate"},
		{Config{ErrorRate: 0.6, ResetRate: 0.6}, "fault rates"},
		{Config{PackMissingRate: 0.6, PackMalformedRate: 0.6}, "pack missing and malformed"},
		{Config{TimeoutRate: math.NaN()}, "timeout rate"},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %q", tt.cfg, err, tt.want)
		}
	}
}

func TestFormatReset(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 20 * time.Millisecond: "20ms", time.Second: "1s", 6 * time.Minute: "6m0s",
		1500*time.Millisecond + 1: "1.501s",
	} {
		if got := FormatReset(d); got != want {
			t.Errorf("FormatReset(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestReplyAndEmbeddingDeterministic(t *testing.T) {
	a, _ := Reply("same", 50, 24)
	b, _ := Reply("same", 50, 24)
	c, _ := Reply("other", 50, 24)
	if a != b || a == c {
		t.Fatalf("%q %q %q", a, b, c)
	}
	if Tokens(a) > 24 {
		t.Fatalf("reply has %d tokens, want at most 24", Tokens(a))
	}
	if !equal(Embedding("x", 4), Embedding("x", 4)) || equal(Embedding("x", 4), Embedding("y", 4)) {
		t.Fatal("embeddings are not a function of the text")
	}
}

// FuzzHandler sends arbitrary bodies to every endpoint: the simulator never
// panics and always answers a JSON body with a known status.
func FuzzHandler(f *testing.F) {
	p, _ := pack.Build("", []string{"a", "b"}, 5)
	seeds := []string{
		`{"model":"sim-chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"sim-chat","messages":[{"role":"system","content":` + quote(p.System) + `},{"role":"user","content":` + quote(p.User) + `}],"max_tokens":9}`,
		`{"model":"sim-chat","prompt":["a","b"],"max_tokens":3}`,
		`{"model":"sim-chat","input":["a","b"],"encoding_format":"base64","dimensions":2}`,
		`{"model":"sim-chat","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
		`{`, `null`, `[]`, `{"model":"nope"}`,
	}
	for _, s := range seeds {
		for ep := range uint8(3) {
			f.Add(ep, s)
		}
	}
	s, err := New(Config{Models: []string{"sim-chat"}, EmbeddingDim: 4})
	if err != nil {
		f.Fatal(err)
	}
	paths := []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}
	f.Fuzz(func(t *testing.T, ep uint8, body string) {
		req := httptest.NewRequest(http.MethodPost, paths[int(ep)%len(paths)], strings.NewReader(body))
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 404, 413:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("status %d with a body that is not JSON: %q", rec.Code, rec.Body)
		}
	})
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
