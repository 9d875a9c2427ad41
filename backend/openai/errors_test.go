package openai_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

const testKey = "sk-test-0123456789abcdefSECRET"

// answer serves every call with status, headers and body; it echoes the
// caller's Authorization header into the body when body holds "%KEY%".
func answer(status int, body string, hdr ...string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, strings.ReplaceAll(body, "%KEY%", r.Header.Get("Authorization")))
	}))
}

// answerT is answer, closed when the test ends.
func answerT(t *testing.T, status int, body string, hdr ...string) *httptest.Server {
	srv := answer(status, body, hdr...)
	t.Cleanup(srv.Close)
	return srv
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

func upstreamErr(t *testing.T, err error) *batcher.UpstreamError {
	t.Helper()
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) {
		t.Fatalf("error %v (%T) is not an UpstreamError", err, err)
	}
	return ue
}

func TestStatusClasses(t *testing.T) {
	t.Setenv("OPENAI_TEST_KEY", testKey)
	long := strings.Repeat("the upstream explains at length ", 100)
	tests := []struct {
		status int
		class  batcher.ErrorClass
		body   string
	}{
		{400, batcher.ClassInvalidRequest, `{"error":{"message":"Invalid 'messages': empty array.","type":"invalid_request_error"}}`},
		{422, batcher.ClassInvalidRequest, `{"detail":"Unprocessable input"}`},
		{404, batcher.ClassNotFound, `{"error":{"message":"The model 'gpt-9' does not exist","code":"model_not_found"}}`},
		{413, batcher.ClassInvalidRequest, `{"message":"too large"}`},
		{401, batcher.ClassAuth, `{"error":{"message":"Incorrect API key provided: %KEY%."}}`},
		{403, batcher.ClassAuth, `{"error":"forbidden for %KEY%"}`},
		{408, batcher.ClassTimeout, ``},
		{409, batcher.ClassServer, `{"error":{"message":"conflict"}}`},
		{429, batcher.ClassRateLimit, `{"error":{"message":"Rate limit reached"}}`},
		{500, batcher.ClassServer, `{"error":{"message":"` + long + `"}}`},
		{502, batcher.ClassServer, `<html>bad gateway %KEY%</html>`},
		{503, batcher.ClassServer, `{"error":{"message":"echo of key %KEY%"}}`},
		{504, batcher.ClassServer, ``},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv := answer(tt.status, tt.body)
			defer srv.Close()
			be := newBackend(t, openai.Config{BaseURL: srv.URL, APIKeyEnv: "OPENAI_TEST_KEY"})
			out, _, err := dispatch(context.Background(), be, "r", "m", 16, embedding("r", "x"))
			ue := upstreamErr(t, err)
			if ue.Class != tt.class || ue.StatusCode != tt.status || openai.StatusClass(tt.status) != tt.class {
				t.Fatalf("class %v status %d, want %v %d", ue.Class, ue.StatusCode, tt.class, tt.status)
			}
			if !errors.Is(out[0].Err, err) && out[0].Err != nil {
				t.Fatalf("response error %v differs from the batch's %v", out[0].Err, err)
			}
			for _, s := range []string{ue.Message, ue.Error(), ue.Err.Error()} {
				if strings.Contains(s, "SECRET") || strings.Contains(s, "0123456789") {
					t.Fatalf("error text leaks the key: %q", s)
				}
			}
			if len(ue.Message) > 256 || strings.Contains(ue.Message, "<html>") {
				t.Fatalf("message carries the body: %q", ue.Message)
			}
			if ue.Message == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestUpstreamMessageKept(t *testing.T) {
	srv := answer(404, `{"error":{"message":"The model 'gpt-9' does not exist","code":"model_not_found"}}`)
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL})
	_, _, err := dispatch(context.Background(), be, "r", "gpt-9", 16, chat("r", "x"))
	if ue := upstreamErr(t, err); ue.Message != "HTTP 404 Not Found from /chat/completions: The model 'gpt-9' does not exist" {
		t.Fatalf("message %q", ue.Message)
	}
}

func TestRateLimitErrorCarriesHeaders(t *testing.T) {
	srv := answer(429, `{"error":{"message":"slow down"}}`,
		"Retry-After", "7", "x-ratelimit-remaining-requests", "0", "x-ratelimit-remaining-tokens", "1200",
		"x-ratelimit-reset-requests", "6m0s", "x-ratelimit-reset-tokens", "20ms")
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL})
	_, _, err := dispatch(context.Background(), be, "r", "m", 16, completion("r", "x"))
	ue := upstreamErr(t, err)
	want := batcher.RateLimitInfo{RetryAfter: 7 * time.Second, RemainingRequests: 0, RemainingTokens: 1200,
		ResetRequests: 6 * time.Minute, ResetTokens: 20 * time.Millisecond}
	if ue.Class != batcher.ClassRateLimit || ue.RateLimit == nil || *ue.RateLimit != want {
		t.Fatalf("error %+v rate limit %+v, want %+v", ue, ue.RateLimit, want)
	}
}

func TestSuccessReportsLimits(t *testing.T) {
	sim, url := startSim(t, llmsim.Config{RPM: 100, TPM: 10000})
	var seen []batcher.RateLimitInfo
	be := newBackend(t, openai.Config{BaseURL: url, OnRateLimit: func(rl batcher.RateLimitInfo) { seen = append(seen, rl) }})
	_, b, err := dispatch(context.Background(), be, "r", "sim-embedding", 0, embedding("r", "abcdefgh"))
	if err != nil {
		t.Fatal(err)
	}
	rl := b.RateLimit
	if rl == nil || rl.RemainingRequests != 99 || rl.RemainingTokens != 10000-2 || rl.ResetRequests <= 0 || len(seen) != 1 || seen[0] != *rl {
		t.Fatalf("batch rate limit %+v, hook saw %+v", rl, seen)
	}
	if sim.Stats().OK != 1 {
		t.Fatal("no call")
	}
}

func TestFanOutReportsMostRestrictiveLimits(t *testing.T) {
	_, url := startSim(t, llmsim.Config{RPM: 100})
	be := newBackend(t, openai.Config{BaseURL: url, MaxFanOut: 1})
	_, b, err := dispatch(context.Background(), be, "r", "sim-chat", 8, chat("r", "a"), chat("r", "b"), chat("r", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if b.RateLimit == nil || b.RateLimit.RemainingRequests != 97 {
		t.Fatalf("rate limit %+v; want the last call's 97 remaining", b.RateLimit)
	}
}

func TestNetworkErrors(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		be := newBackend(t, openai.Config{BaseURL: "http://" + addr + "/v1"})
		_, _, err = dispatch(context.Background(), be, "r", "m", 16, embedding("r", "x"))
		if ue := upstreamErr(t, err); ue.Class != batcher.ClassNetwork || !strings.Contains(ue.Message, "refused") {
			t.Fatalf("%+v", ue)
		}
	})
	t.Run("connection reset", func(t *testing.T) {
		_, url := startSim(t, llmsim.Config{ResetRate: 1})
		be := newBackend(t, openai.Config{BaseURL: url})
		_, _, err := dispatch(context.Background(), be, "r", "sim-chat", 16, chat("r", "x"))
		if ue := upstreamErr(t, err); ue.Class != batcher.ClassNetwork {
			t.Fatalf("%+v", ue)
		}
	})
	t.Run("dns", func(t *testing.T) {
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "upstream.invalid", IsNotFound: true}}
		}}
		be := newBackend(t, openai.Config{BaseURL: "http://upstream.invalid/v1", Transport: tr})
		_, _, err := dispatch(context.Background(), be, "r", "m", 16, embedding("r", "x"))
		if ue := upstreamErr(t, err); ue.Class != batcher.ClassNetwork || !strings.Contains(ue.Message, "DNS") {
			t.Fatalf("%+v", ue)
		}
	})
}

func TestTimeouts(t *testing.T) {
	_, url := startSim(t, llmsim.Config{TimeoutRate: 1})
	t.Run("backend timeout", func(t *testing.T) {
		be := newBackend(t, openai.Config{BaseURL: url, Timeout: 50 * time.Millisecond})
		_, _, err := dispatch(context.Background(), be, "r", "sim-embedding", 0, embedding("r", "x"))
		if ue := upstreamErr(t, err); ue.Class != batcher.ClassTimeout {
			t.Fatalf("%+v", ue)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		be := newBackend(t, openai.Config{BaseURL: url})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		out, _, err := dispatch(ctx, be, "r", "sim-chat", 8, chat("r", "x"), chat("r", "y"))
		if ue := upstreamErr(t, err); ue.Class != batcher.ClassTimeout || batcher.ClassOf(out[1].Err) != batcher.ClassTimeout {
			t.Fatalf("%+v %+v", ue, out)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		be := newBackend(t, openai.Config{BaseURL: url})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, _, err := dispatch(ctx, be, "r", "sim-embedding", 0, embedding("r", "x"))
			errc <- err
		}()
		cancel()
		err := <-errc
		var ue *batcher.UpstreamError
		if !errors.Is(err, context.Canceled) || errors.As(err, &ue) {
			t.Fatalf("err = %v; want context.Canceled as is", err)
		}
	})
}

func TestInvalidResponses(t *testing.T) {
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the request first: closing with unread input sends a reset,
		// which is a network error, not a cut body.
		_, _ = io.Copy(io.Discard, r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"data\":[{\"index\":0,")
		_ = buf.Flush()
		_ = conn.Close()
	}))
	defer cut.Close()
	tests := []struct {
		name string
		url  string
		cfg  func(*openai.Config)
	}{
		{"body cut short", cut.URL, nil},
		{"not json", answerT(t, 200, "<html>hello</html>").URL, nil},
		{"truncated json", answerT(t, 200, `{"data":[{"index":0,"embedding":[0.1,`).URL, nil},
		{"empty body", answerT(t, 200, "").URL, nil},
		{"wrong shape", answerT(t, 200, `{"data":"nope"}`).URL, nil},
		{"redirect", answerT(t, 307, "", "Location", "http://127.0.0.1:1/elsewhere").URL, nil},
		{"too large", answerT(t, 200, `{"data":[{"index":0,"embedding":[`+strings.Repeat("0.1,", 100)+`0.1]}]}`).URL,
			func(c *openai.Config) { c.MaxResponseBytes = 64 }},
		{"no data", answerT(t, 200, `{"data":[]}`).URL, nil},
		{"index out of range", answerT(t, 200, `{"data":[{"index":3,"embedding":[1]}]}`).URL, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := openai.Config{BaseURL: tt.url}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			be := newBackend(t, cfg)
			_, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "x"))
			if ue := upstreamErr(t, err); ue.Class != batcher.ClassInvalidResponse {
				t.Fatalf("%+v (%v)", ue, ue.Err)
			}
		})
	}
	_, url := startSim(t, llmsim.Config{MalformedRate: 1, Seed: 5})
	be := newBackend(t, openai.Config{BaseURL: url})
	for range 4 {
		_, _, err := dispatch(context.Background(), be, "r", "sim-chat", 8, completion("r", "x"))
		if ue := upstreamErr(t, err); ue.Class != batcher.ClassInvalidResponse {
			t.Fatalf("llmsim malformed body: %+v", ue)
		}
	}
}

func TestNativeBatchRouting(t *testing.T) {
	t.Run("embeddings out of order", func(t *testing.T) {
		srv := answer(200, `{"data":[{"index":2,"embedding":[2]},{"index":0,"embedding":[0]},{"index":1,"embedding":[1]}],"usage":{"prompt_tokens":9}}`)
		defer srv.Close()
		be := newBackend(t, openai.Config{BaseURL: srv.URL})
		out, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "a"), embedding("r", "bb"), embedding("r", "cccccc"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range out {
			if len(out[i].Embedding) != 1 || out[i].Embedding[0] != float32(i) {
				t.Fatalf("response %d = %+v", i, out[i])
			}
		}
		// 9 tokens in proportion 1:2:6.
		if out[0].Usage.PromptTokens != 1 || out[1].Usage.PromptTokens != 2 || out[2].Usage.PromptTokens != 6 {
			t.Fatalf("usage %v %v %v", out[0].Usage, out[1].Usage, out[2].Usage)
		}
	})
	t.Run("embeddings partial", func(t *testing.T) {
		srv := answer(200, `{"data":[{"index":0,"embedding":[0]},{"index":1,"embedding":[1]},{"index":1,"embedding":[9]},{"index":2,"embedding":[]}]}`)
		defer srv.Close()
		be := newBackend(t, openai.Config{BaseURL: srv.URL})
		out, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "a"), embedding("r", "b"), embedding("r", "c"), embedding("r", "d"))
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Err != nil || out[0].Embedding[0] != 0 {
			t.Fatalf("response 0 = %+v", out[0])
		}
		for i := 1; i < 4; i++ { // duplicate, empty, missing
			if batcher.ClassOf(out[i].Err) != batcher.ClassInvalidResponse || out[i].Embedding != nil {
				t.Fatalf("response %d = %+v", i, out[i])
			}
		}
	})
	t.Run("embeddings without index", func(t *testing.T) {
		srv := answer(200, `{"data":[{"embedding":[0]},{"embedding":[1]}]}`)
		defer srv.Close()
		be := newBackend(t, openai.Config{BaseURL: srv.URL})
		out, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "a"), embedding("r", "b"))
		if err != nil || out[1].Embedding[0] != 1 {
			t.Fatalf("%v %+v", err, out)
		}
	})
	t.Run("completions by choice index", func(t *testing.T) {
		srv := answer(200, `{"choices":[{"index":1,"text":"B","finish_reason":"length"},{"index":0,"text":"A","finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`)
		defer srv.Close()
		be := newBackend(t, openai.Config{BaseURL: srv.URL})
		out, _, err := dispatch(context.Background(), be, "r", "m", 5, completion("r", "aa"), completion("r", "bb"))
		if err != nil {
			t.Fatal(err)
		}
		if out[0].Text != "A" || out[0].FinishReason != batcher.FinishStop || out[1].Text != "B" || out[1].FinishReason != batcher.FinishLength {
			t.Fatalf("%+v", out)
		}
		if out[0].Usage != (batcher.Usage{PromptTokens: 2, CompletionTokens: 1}) || out[1].Usage != out[0].Usage {
			t.Fatalf("usage %+v %+v", out[0].Usage, out[1].Usage)
		}
	})
	t.Run("chat reply shapes", func(t *testing.T) {
		for body, want := range map[string]batcher.Response{
			`{"choices":[{"index":0,"message":{"content":null,"refusal":"I can't."},"finish_reason":"stop"}]}`: {Text: "I can't.", FinishReason: batcher.FinishContentFilter},
			`{"choices":[{"index":0,"message":{"content":""},"finish_reason":"length"}]}`:                      {Text: "", FinishReason: batcher.FinishLength},
			`{"choices":[{"index":0,"message":{"content":"ok"},"finish_reason":"content_filter"}]}`:            {Text: "ok", FinishReason: batcher.FinishContentFilter},
		} {
			srv := answer(200, body)
			be := newBackend(t, openai.Config{BaseURL: srv.URL})
			out, _, err := dispatch(context.Background(), be, "r", "m", 5, chat("r", "x"))
			srv.Close()
			if err != nil || out[0].Text != want.Text || out[0].FinishReason != want.FinishReason {
				t.Fatalf("%s: %+v %v", body, out[0], err)
			}
		}
		for _, body := range []string{`{"choices":[]}`, `{"choices":[{"index":0,"message":{}}]}`} {
			srv := answer(200, body)
			be := newBackend(t, openai.Config{BaseURL: srv.URL})
			_, _, err := dispatch(context.Background(), be, "r", "m", 5, chat("r", "x"))
			srv.Close()
			if batcher.ClassOf(err) != batcher.ClassInvalidResponse {
				t.Fatalf("%s: %v", body, err)
			}
		}
	})
}

func TestRequestHeaders(t *testing.T) {
	t.Setenv("AZURE_TEST_KEY", "azure-secret")
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		_, _ = io.WriteString(w, `{"data":[{"index":0,"embedding":[1]}]}`)
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{
		BaseURL: srv.URL + "/openai/v1/?api-version=2024-10-21", APIKeyEnv: "AZURE_TEST_KEY", APIKeyHeader: "api-key",
		Organization: "org-1", Project: "proj-1", Headers: map[string]string{"X-Title": "batcher"},
	})
	if _, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "x")); err != nil {
		t.Fatal(err)
	}
	r := <-got
	h := r.Header
	if r.URL.Path != "/openai/v1/embeddings" || r.URL.Query().Get("api-version") != "2024-10-21" {
		t.Fatalf("url %s", r.URL)
	}
	if h.Get("api-key") != "azure-secret" || h.Get("Authorization") != "" || h.Get("OpenAI-Organization") != "org-1" ||
		h.Get("OpenAI-Project") != "proj-1" || h.Get("X-Title") != "batcher" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", h)
	}
}

// TestStreamRequestHeaders: a streamed call sends the same headers as the
// others, and Accept: text/event-stream, on every call (each sends its own
// copy of them).
func TestStreamRequestHeaders(t *testing.T) {
	t.Setenv("OPENAI_TEST_KEY", "sk-stream")
	got := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL, APIKeyEnv: "OPENAI_TEST_KEY", Organization: "org-1", Project: "proj-1",
		Headers: map[string]string{"X-Title": "batcher"}})
	for i := range 2 {
		r := chat("r", "x")
		if _, err := be.Stream(context.Background(), &batcher.Batch{ID: "b", Model: "m", Op: batcher.OpChat, Requests: []*batcher.Request{r}, MaxTokens: 8}, discardDeltas{}); err != nil {
			t.Fatal(err)
		}
		h := <-got
		for k, want := range map[string]string{"Authorization": "Bearer sk-stream", "OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1",
			"X-Title": "batcher", "Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "batcher"} {
			if v := h.Values(k); len(v) != 1 || v[0] != want {
				t.Fatalf("call %d: %s %q, want %q (headers %v)", i, k, v, want, h)
			}
		}
	}
}

type discardDeltas struct{}

func (discardDeltas) WriteDelta(*batcher.Delta) error { return nil }

func TestRequestBodies(t *testing.T) {
	got := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if err := jsonDecode(r.Body, &m); err != nil {
			t.Error(err)
		}
		got <- m
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"content":"x"}}]}`)
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL, MaxTokensField: "max_completion_tokens"})
	temp, seed := float32(0.5), int64(42)
	req := chat("r", "hello", "sys")
	req.Params = batcher.Params{Temperature: &temp, Seed: &seed, Stop: []string{"END"}}
	if _, _, err := dispatch(context.Background(), be, "r", "gpt-x", 77, req); err != nil {
		t.Fatal(err)
	}
	m := <-got
	msgs, _ := m["messages"].([]any)
	if m["model"] != "gpt-x" || m["max_completion_tokens"] != 77.0 || m["max_tokens"] != nil || m["temperature"] != 0.5 ||
		m["seed"] != 42.0 || len(msgs) != 2 || m["response_format"] != nil || m["top_p"] != nil {
		t.Fatalf("body %v", m)
	}
	if stop, _ := m["stop"].([]any); len(stop) != 1 || stop[0] != "END" {
		t.Fatalf("stop %v", m["stop"])
	}
}

func TestNewValidates(t *testing.T) {
	t.Setenv("EMPTY_KEY", "")
	tests := []struct {
		cfg  openai.Config
		want string
	}{
		{openai.Config{}, "BaseURL: must be set"},
		{openai.Config{BaseURL: "ftp://x"}, `BaseURL: must use scheme http or https, got "ftp"`},
		{openai.Config{BaseURL: "http://"}, "BaseURL: must name a host"},
		{openai.Config{BaseURL: "http://u:p@x"}, "BaseURL: must not carry credentials"},
		{openai.Config{BaseURL: "http://x", APIKeyEnv: "EMPTY_KEY"}, "APIKeyEnv: environment variable EMPTY_KEY"},
		{openai.Config{BaseURL: "http://x", Timeout: -1}, "Timeout"},
		{openai.Config{BaseURL: "http://x", MaxResponseBytes: -1}, "MaxResponseBytes"},
		{openai.Config{BaseURL: "http://x", MaxFanOut: -1}, "MaxFanOut"},
		{openai.Config{BaseURL: "http://x", MaxIdleConns: -1}, "MaxIdleConns"},
		{openai.Config{BaseURL: "http://x", MaxTokensField: "tokens"}, "MaxTokensField"},
		{openai.Config{BaseURL: "http://x", Headers: map[string]string{"Bad Name": "v"}}, "Headers"},
		{openai.Config{BaseURL: "http://x", Headers: map[string]string{"X": "a\r\nb"}}, `Headers["X"]: must not hold control characters`},
		{openai.Config{BaseURL: "http://x", Headers: map[string]string{"X": "a\x01b"}}, `Headers["X"]: must not hold control characters`},
		{openai.Config{BaseURL: "http://x", APIKeyHeader: "X Key"}, "APIKeyHeader"},
		{openai.Config{BaseURL: "http://x", APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "", false }}, "APIKeyEnv"},
		{openai.Config{BaseURL: "http://x", Pack: openai.PackConfig{MaxItems: 1}}, "Pack.MaxItems"},
		{openai.Config{BaseURL: "http://x", Pack: openai.PackConfig{MaxTokens: -5}}, "Pack.MaxTokens"},
		{openai.Config{BaseURL: "http://x", Pack: openai.PackConfig{ResponseFormat: "xml"}}, "Pack.ResponseFormat"},
		{openai.Config{BaseURL: "http://x", Pack: openai.PackConfig{Routes: []string{""}}}, "Pack.Routes[0]"},
		{openai.Config{BaseURL: "http://x", Pack: openai.PackConfig{Routes: []string{"a", "a"}}}, `Pack.Routes[1]: must not list "a" twice`},
		{openai.Config{BaseURL: "http://x", APIKeyEnv: "OPENAI KEY"}, `APIKeyEnv: must be an environment variable name such as OPENAI_API_KEY, got "OPENAI KEY"`},
		{openai.Config{BaseURL: "http://x", Organization: "a\rb"}, "Organization: must not hold control characters"},
	}
	for _, tt := range tests {
		_, err := openai.New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %q", tt.cfg, err, tt.want)
		}
	}
	// Every bad field is reported at once.
	_, err := openai.New(openai.Config{Timeout: -1, MaxFanOut: -1})
	if err == nil || !strings.Contains(err.Error(), "BaseURL") || !strings.Contains(err.Error(), "Timeout") || !strings.Contains(err.Error(), "MaxFanOut") {
		t.Fatalf("err = %v", err)
	}
}

// Validate reports New's errors, as *FieldError, without the environment.
func TestValidateIsNewWithoutTheEnvironment(t *testing.T) {
	if err := openai.Validate(openai.Config{BaseURL: "http://x", APIKeyEnv: "BATCHER_TEST_UNSET_KEY"}); err != nil {
		t.Fatalf("Validate read the environment: %v", err)
	}
	err := openai.Validate(openai.Config{BaseURL: "http://x", MaxFanOut: -1, Pack: openai.PackConfig{MaxItems: 1}})
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *openai.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if want := []string{"MaxFanOut", "Pack.MaxItems"}; !slices.Equal(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
}

func TestKeyHeaderCannotBeOverridden(t *testing.T) {
	t.Setenv("K", "secret")
	_, err := openai.New(openai.Config{BaseURL: "http://x", APIKeyEnv: "K", Headers: map[string]string{"authorization": "Bearer other"}})
	if err == nil || !strings.Contains(err.Error(), "API key") {
		t.Fatalf("err = %v", err)
	}
}

func TestConnectionsAreReused(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"data":[{"index":0,"embedding":[1]}]}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL})
	for range 20 {
		if _, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "x")); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential calls opened %d connections, want 1 kept alive", n)
	}
}

func TestHTTP2WhereOffered(t *testing.T) {
	protos := make(chan int, 2)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.ProtoMajor
		_, _ = io.WriteString(w, `{"data":[{"index":0,"embedding":[1]}]}`)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	be := newBackend(t, openai.Config{BaseURL: srv.URL, TLS: &tls.Config{RootCAs: roots}})
	for range 2 {
		if _, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "x")); err != nil {
			t.Fatal(err)
		}
		if p := <-protos; p != 2 {
			t.Fatalf("HTTP/%d, want HTTP/2", p)
		}
	}
}
