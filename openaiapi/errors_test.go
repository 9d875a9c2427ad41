package openaiapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/openaiapi"
)

func chatParams(model, text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
}

// TestErrorsBadInput: 400 with the param at fault, through the SDK.
func TestErrorsBadInput(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct {
		name   string
		params openai.ChatCompletionNewParams
		param  string
		msg    string
	}{
		{"temperature", func() openai.ChatCompletionNewParams {
			p := chatParams("chat", "x")
			p.Temperature = openai.Float(3)
			return p
		}(), "temperature", "must be 0 to 2"},
		{"n", func() openai.ChatCompletionNewParams {
			p := chatParams("chat", "x")
			p.N = openai.Int(2)
			return p
		}(), "n", "not supported by this model's backend"},
		{"max_tokens", func() openai.ChatCompletionNewParams {
			p := chatParams("chat", "x")
			p.MaxCompletionTokens = openai.Int(0)
			return p
		}(), "max_completion_tokens", "at least 1"},
		{"no messages", openai.ChatCompletionNewParams{Model: "chat"}, "messages", "at least one"},
		{"wrong operation", chatParams("embed", "x"), "messages", "takes embedding input"},
		{"service tier", func() openai.ChatCompletionNewParams {
			p := chatParams("chat", "x")
			p.ServiceTier = "scale"
			return p
		}(), "service_tier", "must be auto"},
	} {
		_, err := e.client.Chat.Completions.New(testCtx(t), tc.params)
		ae := apiError(t, err)
		if ae.StatusCode != http.StatusBadRequest || ae.Param != tc.param || ae.Type != "invalid_request_error" || !strings.Contains(ae.Message, tc.msg) {
			t.Errorf("%s: %d %s param %q: %q; want 400 param %q containing %q", tc.name, ae.StatusCode, ae.Type, ae.Param, ae.Message, tc.param, tc.msg)
		}
	}
	if n := e.fake.calls.Load(); n != 0 {
		t.Errorf("%d upstream calls for bad input", n)
	}
}

// TestErrorsItem: a bad item of an array is named by its index.
func TestErrorsItem(t *testing.T) {
	e := newEnv(t, newFake())
	_, err := e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
		Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "", "c"}},
	})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "input[1]" {
		t.Errorf("%d param %q (%s), want 400 param input[1]", ae.StatusCode, ae.Param, ae.Message)
	}
	_, err = e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
		Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b", "fail:invalid"}},
	})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "input[2]" || !strings.Contains(ae.Message, "upstream rejected") {
		t.Errorf("%d param %q (%s), want 400 param input[2]", ae.StatusCode, ae.Param, ae.Message)
	}
}

// TestErrorsMalformed: raw bodies the SDK would never send.
func TestErrorsMalformed(t *testing.T) {
	e := newEnv(t, newFake())
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	for _, tc := range []struct {
		name, body string
		status     int
		param      string
		msg        string
	}{
		{"syntax", "{\"model\":\"chat\",\n \"messages\": [}", 400, "", "malformed JSON at line 2, column 15"},
		{"truncated", `{"model":"chat"`, 400, "", "malformed JSON at line 1"},
		{"empty", ``, 400, "", "request body is empty"},
		{"not an object", `[1,2]`, 400, "", "must be a JSON object"},
		{"type", `{"model":"chat","temperature":"hot","messages":[{"role":"user","content":"x"}]}`, 400, "temperature", "want a number, got string"},
		{"content type", `{"model":"chat","messages":[{"role":"user","content":7}]}`, 400, "messages.content", "got number"},
		{"deep", `{"model":"chat","x":` + deep + `}`, 400, "", "nested deeper than 64 levels at line 1, column 84"},
		{"unknown model", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model", "does not exist"},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model", "must be set"},
		{"role", `{"model":"chat","messages":[{"role":"user","content":"a"},{"role":"robot","content":"b"}]}`, 400, "messages[1].role", "must be system"},
	} {
		code, _, body := e.post(t, "/chat/completions", tc.body)
		var got struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Errorf("%s: body %q: %v", tc.name, body, err)
			continue
		}
		param := ""
		if got.Error.Param != nil {
			param = *got.Error.Param
		}
		if code != tc.status || param != tc.param || !strings.Contains(got.Error.Message, tc.msg) {
			t.Errorf("%s: %d param %q %q; want %d param %q containing %q", tc.name, code, param, got.Error.Message, tc.status, tc.param, tc.msg)
		}
	}
	// Nothing is ignored: an unknown top-level field is forwarded as an
	// extra body field, and refused by name where the backend (this fake)
	// cannot forward it; so are tools and names it does not take.
	for body, param := range map[string]string{
		`{"model":"chat","frobnicate":{"a":[1]},"messages":[{"role":"user","content":"x"}]}`:                                                          "frobnicate",
		`{"model":"chat","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"x"}]}`:                           "tools",
		`{"model":"chat","messages":[{"role":"user","content":"x","name":"n"}]}`:                                                                      "messages[0].name",
		`{"model":"chat","response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{}}},"messages":[{"role":"user","content":"x"}]}`: "response_format",
	} {
		code, _, got := e.post(t, "/chat/completions", body)
		if code != http.StatusBadRequest || !strings.Contains(got, `"param":"`+param+`"`) || !strings.Contains(got, "not supported") {
			t.Errorf("%s: %d %s, want 400 naming %s", body, code, got, param)
		}
	}
}

func TestErrorsBodyLimit(t *testing.T) {
	e := newEnv(t, newFake(), withHandler(openaiapi.WithMaxBodyBytes(100)))
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", strings.Repeat("x", 200)))
	if ae := apiError(t, err); ae.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(ae.Message, "larger than 100 bytes") {
		t.Errorf("%d %q, want 413", ae.StatusCode, ae.Message)
	}
}

func TestErrorsAuth(t *testing.T) {
	e := newEnv(t, newFake())
	for _, key := range []string{"", "sk-wrong", testToken + "x"} {
		c := openai.NewClient(option.WithBaseURL(e.url+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
		_, err := c.Models.List(testCtx(t))
		if ae := apiError(t, err); ae.StatusCode != http.StatusUnauthorized || ae.Code != "invalid_api_key" || strings.Contains(ae.Message, testToken) {
			t.Errorf("key %q: %d %q %q, want 401 invalid_api_key", key, ae.StatusCode, ae.Code, ae.Message)
		}
	}
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, e.url+"/models", nil)
	req.Header.Set("Authorization", "bearer "+testToken) // the scheme is case-insensitive
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("lower-case scheme: %d", resp.StatusCode)
	}
}

func TestErrorsUnknownURLAndMethod(t *testing.T) {
	e := newEnv(t, newFake())
	code, _, body := e.post(t, "/batches", `{}`)
	if code != http.StatusNotFound || !strings.Contains(body, "Invalid URL (POST /v1/batches)") {
		t.Errorf("batches without a handler: %d %s", code, body)
	}
	code, h, body := e.post(t, "/models", `{}`)
	if code != 405 || h.Get("Allow") != "GET" || !strings.Contains(body, `"type":"invalid_request_error"`) {
		t.Errorf("POST /models: %d %s", code, body)
	}
}

// TestErrorsUpstream: each upstream class gets its status, and the
// upstream's message, never its cause.
func TestErrorsUpstream(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct {
		class      string
		status     int
		retryAfter string
	}{
		{"timeout", 504, ""},
		{"network", 502, ""},
		{"server", 502, ""},
		{"auth", 500, ""},
		{"invalid", 400, ""},
		{"badresp", 502, ""},
		{"unknown", 502, ""},
		{"ratelimit", 429, "3"}, // last: the core then pauses the backend for the Retry-After
	} {
		var resp *http.Response
		_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "fail:"+tc.class), option.WithResponseInto(&resp))
		ae := apiError(t, err)
		if ae.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d (%s)", tc.class, ae.StatusCode, tc.status, ae.Message)
		}
		if got := ae.Response.Header.Get("Retry-After"); got != tc.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tc.class, got, tc.retryAfter)
		}
		if tc.class == "auth" && strings.Contains(ae.Message, "injected") {
			t.Errorf("auth: the upstream's message %q crossed the wire", ae.Message)
		}
	}
}

func TestErrorsQueueFull(t *testing.T) {
	f := newFake()
	f.hold = true
	e := newEnv(t, f, withCore(batcher.WithQueueCapacity(1)))
	first := make(chan error, 1)
	go func() {
		_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "first"))
		first <- err
	}()
	select {
	case <-f.started:
	case <-time.After(testTimeout):
		t.Fatal("the first request never reached the backend")
	}
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "second"))
	ae := apiError(t, err)
	if ae.StatusCode != http.StatusTooManyRequests || ae.Code != "queue_full" || ae.Response.Header.Get("Retry-After") != "1" || ae.Response.Header.Get("Retry-After-Ms") != "1000" {
		t.Errorf("%d %q Retry-After %q, want 429 queue_full after 1", ae.StatusCode, ae.Code, ae.Response.Header.Get("Retry-After"))
	}
	f.Release()
	if err := <-first; err != nil {
		t.Errorf("first: %v", err)
	}
}

// TestErrorsDeadline: the client's timeout header bounds the request in
// the core.
func TestErrorsDeadline(t *testing.T) {
	f := newFake()
	f.hold = true
	e := newEnv(t, f)
	for _, h := range []string{"X-Batcher-Timeout", "X-Stainless-Timeout"} {
		v := "50ms"
		if h == "X-Stainless-Timeout" {
			v = "0.05"
		}
		start := time.Now()
		_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "slow"), option.WithHeader(h, v))
		ae := apiError(t, err)
		if ae.StatusCode != http.StatusGatewayTimeout || ae.Code != "deadline_exceeded" {
			t.Errorf("%s: %d %q, want 504 deadline_exceeded", h, ae.StatusCode, ae.Code)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: took %v", h, took)
		}
	}
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "x"), option.WithHeader("X-Batcher-Timeout", "soon"))
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "X-Batcher-Timeout" {
		t.Errorf("bad header: %d %q", ae.StatusCode, ae.Param)
	}
	_, err = e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "x"), option.WithHeader("X-Stainless-Timeout", "-1"))
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "X-Stainless-Timeout" {
		t.Errorf("negative SDK timeout: %d %q", ae.StatusCode, ae.Param)
	}
}

// TestDefaultTimeout: without a header, the setting bounds the call.
func TestDefaultTimeout(t *testing.T) {
	f := newFake()
	f.hold = true
	e := newEnv(t, f, withHandler(openaiapi.WithDefaultTimeout(50*time.Millisecond)))
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "slow"))
	if ae := apiError(t, err); ae.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("%d %q, want 504", ae.StatusCode, ae.Code)
	}
}

// TestErrorsShutdown: once the core's admission has closed, every call is
// 503, the files API too.
func TestErrorsShutdown(t *testing.T) {
	e := newEnv(t, newFake())
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := e.core.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", "late"))
	if ae := apiError(t, err); ae.StatusCode != http.StatusServiceUnavailable || ae.Code != "shutting_down" {
		t.Errorf("chat: %d %q, want 503", ae.StatusCode, ae.Code)
	}
	_, err = e.client.Files.Get(testCtx(t), "file-000000000000000000000000")
	if ae := apiError(t, err); ae.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("files: %d, want 503", ae.StatusCode)
	}
}

// TestErrorsCancel: a caller that goes away cancels its request in the
// core.
func TestErrorsCancel(t *testing.T) {
	f := newFake()
	f.hold = true
	e := newEnv(t, f)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := e.client.Chat.Completions.New(ctx, chatParams("chat", "bye"))
		done <- err
	}()
	<-f.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client: %v", err)
	}
	select {
	case <-f.ctxDone: // the batch's context ended: its one request was cancelled
	case <-time.After(testTimeout):
		t.Fatal("the request stayed in flight after its caller left")
	}
}
