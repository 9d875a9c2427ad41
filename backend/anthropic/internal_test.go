package anthropic

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

func ptr[T any](v T) *T { return &v }

func TestBuildRequestMapsTheChatSurface(t *testing.T) {
	r := &batcher.Request{
		Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{
			{Role: "system", Content: "Be brief."},
			{Role: "developer", Content: "Use metric units."},
			{Role: "user", Parts: []batcher.ContentPart{
				{Kind: batcher.PartText, Text: "What is in this picture, and the weather there?"},
				{Kind: batcher.PartImage, ImageURL: "data:image/png;base64,iVBORw0KGgo="},
				{Kind: batcher.PartImage, ImageURL: "https://example.com/cat.jpg", Detail: "low"},
			}},
			{Role: "assistant", Content: "Let me look.", ToolCalls: []batcher.ToolCall{
				{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
				{ID: "toolu_2", Name: "get_time", Arguments: ``},
			}},
			{Role: "tool", ToolCallID: "toolu_1", Content: "21C"},
			{Role: "tool", ToolCallID: "toolu_2", Content: "noon"},
			{Role: "user", Content: "Thanks!"},
		}},
		Params: batcher.Params{Temperature: ptr(float32(0.5)), TopP: ptr(float32(0.9)), Stop: []string{"END"}},
		Chat: &batcher.ChatOptions{
			Tools: []batcher.Tool{
				{Name: "get_weather", Description: "Weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)},
				{Name: "get_time"},
			},
			ToolChoice:        batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"},
			ParallelToolCalls: ptr(false),
			User:              "user-42",
			Extra:             []byte(`{"top_k":5}`),
		},
	}
	req, err := buildRequest("claude-x", r, 300)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(req)
	raw = withExtra(raw, req)
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("body %s: %v", raw, err)
	}
	want := `{"max_tokens":300,"messages":[` +
		`{"content":[{"text":"What is in this picture, and the weather there?","type":"text"},` +
		`{"source":{"data":"iVBORw0KGgo=","media_type":"image/png","type":"base64"},"type":"image"},` +
		`{"source":{"type":"url","url":"https://example.com/cat.jpg"},"type":"image"}],"role":"user"},` +
		`{"content":[{"text":"Let me look.","type":"text"},{"id":"toolu_1","input":{"city":"Paris"},"name":"get_weather","type":"tool_use"},` +
		`{"id":"toolu_2","input":{},"name":"get_time","type":"tool_use"}],"role":"assistant"},` +
		`{"content":[{"content":"21C","tool_use_id":"toolu_1","type":"tool_result"},{"content":"noon","tool_use_id":"toolu_2","type":"tool_result"},` +
		`{"text":"Thanks!","type":"text"}],"role":"user"}],` +
		`"metadata":{"user_id":"user-42"},"model":"claude-x","stop_sequences":["END"],"system":"Be brief.\n\nUse metric units.",` +
		`"temperature":0.5,"tool_choice":{"disable_parallel_tool_use":true,"name":"get_weather","type":"tool"},` +
		`"tools":[{"description":"Weather","input_schema":{"properties":{"city":{"type":"string"}},"type":"object"},"name":"get_weather"},` +
		`{"input_schema":{"properties":{},"type":"object"},"name":"get_time"}],"top_k":5,"top_p":0.9}`
	canon, _ := json.Marshal(got)
	if string(canon) != want {
		t.Errorf("body\n%s\nwant\n%s", canon, want)
	}
}

func TestBuildRequestToolChoices(t *testing.T) {
	for _, tc := range []struct {
		mode batcher.ToolChoiceMode
		want string
	}{
		{batcher.ToolChoiceAuto, `{"type":"auto"}`},
		{batcher.ToolChoiceRequired, `{"type":"any"}`},
		{batcher.ToolChoiceNone, `{"type":"none"}`},
	} {
		r := &batcher.Request{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "hi"}}},
			Chat: &batcher.ChatOptions{Tools: []batcher.Tool{{Name: "f"}}, ToolChoice: batcher.ToolChoice{Mode: tc.mode}}}
		req, err := buildRequest("m", r, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(req.ToolChoice); string(got) != tc.want {
			t.Errorf("mode %d: %s, want %s", tc.mode, got, tc.want)
		}
	}
}

func TestBuildRequestRefusesWhatAnthropicCannotCarry(t *testing.T) {
	user := []batcher.Message{{Role: "user", Content: "hi"}}
	for _, tc := range []struct {
		name  string
		r     batcher.Request
		field string
	}{
		{"seed", batcher.Request{Input: batcher.Input{Messages: user}, Params: batcher.Params{Seed: ptr(int64(1))}}, "params.seed"},
		{"only system", batcher.Request{Input: batcher.Input{Messages: []batcher.Message{{Role: "system", Content: "s"}}}}, "messages"},
		{"bad image", batcher.Request{Input: batcher.Input{Messages: []batcher.Message{{Role: "user",
			Parts: []batcher.ContentPart{{Kind: batcher.PartImage, ImageURL: "ftp://x/y.png"}}}}}}, "messages[0].content[0].image_url"},
		{"system image", batcher.Request{Input: batcher.Input{Messages: []batcher.Message{{Role: "system",
			Parts: []batcher.ContentPart{{Kind: batcher.PartImage, ImageURL: "https://x/y.png"}}}, user[0]}}}, "messages[0]"},
		{"arguments", batcher.Request{Input: batcher.Input{Messages: []batcher.Message{user[0],
			{Role: "assistant", ToolCalls: []batcher.ToolCall{{ID: "1", Name: "f", Arguments: "[1]"}}}}}}, "messages[1].tool_calls[0].arguments"},
		{"tool without id", batcher.Request{Input: batcher.Input{Messages: []batcher.Message{user[0], {Role: "tool", Content: "x"}}}}, "messages[1].tool_call_id"},
		{"extra sets system", batcher.Request{Input: batcher.Input{Messages: user}, Chat: &batcher.ChatOptions{Extra: []byte(`{"system":"x"}`)}}, "extra_body.system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildRequest("m", &tc.r, 10)
			if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
				t.Errorf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestFinishReasons(t *testing.T) {
	for in, want := range map[string]batcher.FinishReason{
		"end_turn": batcher.FinishStop, "stop_sequence": batcher.FinishStop, "max_tokens": batcher.FinishLength,
		"tool_use": batcher.FinishToolCalls, "refusal": batcher.FinishContentFilter, "mystery": batcher.FinishUnspecified,
	} {
		if got := finishReason(in); got != want {
			t.Errorf("%s: %v, want %v", in, got, want)
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", "50")
	h.Set("anthropic-ratelimit-requests-remaining", "49")
	h.Set("anthropic-ratelimit-requests-reset", "2026-01-02T03:04:06Z")
	h.Set("anthropic-ratelimit-tokens-limit", "40000")
	h.Set("anthropic-ratelimit-tokens-remaining", "39000")
	h.Set("anthropic-ratelimit-tokens-reset", "2026-01-02T03:05:05Z")
	h.Set("retry-after", "7")
	got := ParseRateLimit(h, now)
	want := batcher.RateLimitInfo{RetryAfter: 7 * time.Second, RemainingRequests: 49, RemainingTokens: 39000,
		ResetRequests: time.Second, ResetTokens: time.Minute, LimitRequests: 50, LimitTokens: 40000}
	if got == nil || *got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Input tokens stand for tokens where the combined headers are absent.
	h = http.Header{}
	h.Set("anthropic-ratelimit-input-tokens-limit", "1000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "10")
	if got := ParseRateLimit(h, now); got == nil || got.LimitTokens != 1000 || got.RemainingTokens != 10 || got.RemainingRequests != -1 {
		t.Errorf("input tokens: %+v", got)
	}
	if got := ParseRateLimit(http.Header{"Retry-After": {"soon"}}, now); got != nil {
		t.Errorf("nothing readable: %+v, want nil", got)
	}
}

func TestStatusErrors(t *testing.T) {
	b, err := New(Config{BaseURL: "http://127.0.0.1:1", APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "sk-ant-secret123456", true }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code  int
		body  string
		class batcher.ErrorClass
		msg   string
	}{
		{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, batcher.ClassServer, "HTTP 529 Overloaded from /v1/messages; retry after 3s"},
		{429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests exceeded"}}`, batcher.ClassRateLimit, "HTTP 429 Too Many Requests from /v1/messages: Number of requests exceeded; retry after 3s"},
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required (key sk-ant-secret123456)"}}`, batcher.ClassInvalidRequest, "HTTP 400 Bad Request from /v1/messages: max_tokens: Field required (key [redacted])"},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key sk-ant-secret123456"}}`, batcher.ClassAuth, "HTTP 401 Unauthorized from /v1/messages: check the backend's API key"},
		{404, `{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}`, batcher.ClassNotFound, "HTTP 404 Not Found from /v1/messages: model: claude-nope"},
	} {
		ue := b.statusError(tc.code, "/v1/messages", []byte(tc.body), &batcher.RateLimitInfo{RetryAfter: 3 * time.Second})
		if ue.Class != tc.class || ue.Message != tc.msg {
			t.Errorf("%d: %v %q, want %v %q", tc.code, ue.Class, ue.Message, tc.class, tc.msg)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	err := Validate(Config{BaseURL: "ftp://x", Version: "latest", MaxTokens: -1, Headers: map[string]string{"x-api-key": "k"}, MaxFanOut: -2})
	for _, want := range []string{"BaseURL: must use scheme http or https", "Version: must be an anthropic-version date",
		"MaxTokens: must not be negative", `Headers["x-api-key"]: must not be a header the backend sets itself`, "MaxFanOut: must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	if err := Validate(Config{}); err != nil {
		t.Errorf("the zero config: %v", err)
	}
	if _, err := New(Config{APIKeyEnv: "K", LookupEnv: func(string) (string, bool) { return "", false }}); err == nil {
		t.Error("an unset key's variable passed")
	}
}
