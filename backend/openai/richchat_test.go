package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

// richUpstream answers every chat call with reply and keeps the last body.
func richUpstream(t *testing.T, reply *string) (*openai.Backend, func() map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var last map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if err := jsonDecode(r.Body, &m); err != nil {
			t.Error(err)
		}
		mu.Lock()
		last = m
		out := *reply
		mu.Unlock()
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	return newBackend(t, openai.Config{BaseURL: srv.URL}), func() map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func richRequest() *batcher.Request {
	r := chat("chat", "")
	r.Input.Messages = []batcher.Message{
		{Role: "user", Name: "ann", Parts: []batcher.ContentPart{{Kind: batcher.PartText, Text: "what is it?"}, {Kind: batcher.PartImage, ImageURL: "https://x/cat.png", Detail: "low"}}},
		{Role: "assistant", ToolCalls: []batcher.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: "sunny"},
	}
	r.MutableChat().Tools = []batcher.Tool{{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`), Strict: true}}
	r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}
	f := false
	r.MutableChat().ParallelToolCalls = &f
	r.MutableChat().ResponseFormat = batcher.ResponseFormat{Type: batcher.FormatJSONSchema, Name: "out", Schema: []byte(`{"type":"object","required":["a"]}`), Strict: true}
	pp := float32(0.5)
	tl := int32(2)
	r.Params = batcher.Params{Rich: &batcher.RichParams{PresencePenalty: &pp, N: 2, LogitBias: map[string]float32{"42": -100}, Logprobs: true, TopLogprobs: &tl, ReasoningEffort: "low"}}
	r.MutableChat().User = "u1"
	r.MutableChat().Extra = []byte(`{"top_k":5,"safe_mode":true}`)
	return r
}

// TestRichRequestMapsBothWays: every field reaches the upstream as OpenAI
// names it, extra fields spliced in at the top; every part of the answer
// comes back.
func TestRichRequestMapsBothWays(t *testing.T) {
	reply := `{"choices":[` +
		`{"index":1,"message":{"content":"{\"a\":1}"},"finish_reason":"stop"},` +
		`{"index":0,"message":{"content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},"finish_reason":"tool_calls",` +
		`"logprobs":{"content":[{"token":"x","logprob":-0.5,"bytes":[120],"top_logprobs":[{"token":"y","logprob":-1,"bytes":[121]}]}]}}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":5}}`
	be, last := richUpstream(t, &reply)
	out, _, err := dispatch(context.Background(), be, "chat", "gpt-x", 100, richRequest())
	if err != nil || out[0].Err != nil {
		t.Fatalf("dispatch: %v %v", err, out[0].Err)
	}
	body, _ := json.Marshal(last())
	for _, want := range []string{
		`"tools":[{"function":{"name":"get_weather","parameters":{`, `"strict":true`,
		`"tool_choice":{"function":{"name":"get_weather"},"type":"function"}`, `"parallel_tool_calls":false`,
		`"response_format":{"json_schema":{"name":"out","schema":{"required":["a"],"type":"object"},"strict":true},"type":"json_schema"}`,
		`{"detail":"low","url":"https://x/cat.png"}`, `"name":"ann"`, `"tool_call_id":"call_1"`,
		`"tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"id":"call_1","type":"function"}]`,
		`"presence_penalty":0.5`, `"n":2`, `"logit_bias":{"42":-100}`, `"logprobs":true`, `"top_logprobs":2`,
		`"reasoning_effort":"low"`, `"user":"u1"`, `"top_k":5`, `"safe_mode":true`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("upstream body lacks %s:\n%s", want, body)
		}
	}
	r := out[0]
	if r.FinishReason != batcher.FinishToolCalls || len(r.ChatOutput().ToolCalls) != 1 || r.ChatOutput().ToolCalls[0].Arguments != `{"city":"Rome"}` ||
		r.ChatOutput().Logprobs == nil || r.ChatOutput().Logprobs.Content[0].Top[0].Token != "y" || string(r.ChatOutput().Logprobs.Content[0].Bytes) != "x" ||
		len(r.ChatOutput().Choices) != 2 || r.ChatOutput().Choices[1].Text != `{"a":1}` || r.Usage.PromptTokens != 10 {
		t.Fatalf("answer %+v", r)
	}
}

// TestRichAnswerBreakingTheRequestIsInvalid: a call of a tool the request
// did not offer, arguments that are not JSON or break a strict schema, or
// a strict response that breaks its schema are invalid_response.
func TestRichAnswerBreakingTheRequestIsInvalid(t *testing.T) {
	var reply string
	be, _ := richUpstream(t, &reply)
	call := func(name, args string) string {
		b, _ := json.Marshal(args)
		return `{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"` + name + `","arguments":` + string(b) + `}}]},"finish_reason":"tool_calls"}]}`
	}
	for name, tc := range map[string]struct {
		reply string
		want  string
	}{
		"unknown tool":      {call("rm_rf", `{}`), "not a tool of the request"},
		"malformed args":    {call("get_weather", `{"city":`), "not JSON"},
		"args off schema":   {call("get_weather", `{"town":"Paris"}`), "strict schema"},
		"answer off schema": {`{"choices":[{"index":0,"message":{"content":"{\"b\":1}"},"finish_reason":"stop"}]}`, "breaks the strict schema"},
		"answer not JSON":   {`{"choices":[{"index":0,"message":{"content":"sure!"},"finish_reason":"stop"}]}`, "not JSON"},
	} {
		reply = tc.reply
		r := richRequest()
		r.Params = batcher.Params{}
		out, _, err := dispatch(context.Background(), be, "chat", "gpt-x", 100, r)
		if err == nil { // a batch of one may fail as a whole or per request
			err = out[0].Err
		}
		if batcher.ClassOf(err) != batcher.ClassInvalidResponse || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (%v), want invalid_response containing %q", name, err, batcher.ClassOf(err), tc.want)
		}
	}
}

// TestPlainRequestBodyUnchanged: a plain request sends exactly the fields
// it did before.
func TestPlainRequestBodyUnchanged(t *testing.T) {
	reply := `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`
	be, last := richUpstream(t, &reply)
	if out, _, err := dispatch(context.Background(), be, "chat", "gpt-x", 100, chat("chat", "hello")); err != nil || out[0].Text != "hi" {
		t.Fatalf("%v %+v", err, out)
	}
	keys := []string{}
	for k := range last() {
		keys = append(keys, k)
	}
	if len(keys) != 3 { // model, messages, max_tokens
		t.Fatalf("plain body fields %v", keys)
	}
}
