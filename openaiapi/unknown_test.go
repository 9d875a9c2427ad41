package openaiapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/batcherhq/batcher/openaiapi"
)

// TestUnknownFieldsRefused: /v1/completions and /v1/embeddings refuse a
// parameter they do not read, naming it and listing those they do, as
// their batch lines do: a dropped frequency_penalty, logprobs or user
// would change the answer unseen. null counts as unset.
func TestUnknownFieldsRefused(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct {
		path, body, param string
	}{
		{"/completions", `{"model":"comp","prompt":"x","frequency_penalty":1.5}`, "frequency_penalty"},
		{"/completions", `{"model":"comp","prompt":"x","logprobs":5,"best_of":2}`, "best_of"},
		{"/completions", `{"model":"comp","prompt":"x","bogus":1}`, "bogus"},
		{"/embeddings", `{"model":"embed","input":"x","user":"u1"}`, "user"},
		{"/embeddings", `{"model":"embed","input":"x","bogus":{"a":1}}`, "bogus"},
	} {
		status, _, body := e.post(t, tc.path, tc.body)
		var got struct {
			Error struct{ Message, Param string }
		}
		_ = json.Unmarshal([]byte(body), &got)
		if status != http.StatusBadRequest || got.Error.Param != tc.param ||
			!strings.Contains(got.Error.Message, "v1"+tc.path) || !strings.Contains(got.Error.Message, "model") {
			t.Errorf("%s %s: %d %s; want 400 param %q listing the fields read", tc.path, tc.body, status, body, tc.param)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/completions", `{"model":"comp","prompt":"x","logit_bias":null,"echo":false}`},
		{"/embeddings", `{"model":"embed","input":"x","user":null,"encoding_format":"float"}`},
	} {
		if status, _, body := e.post(t, tc.path, tc.body); status != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", tc.path, tc.body, status, body)
		}
	}
	// Through the SDK, as a caller meets it.
	_, err := e.client.Completions.New(testCtx(t), openai.CompletionNewParams{
		Model: "comp", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, PresencePenalty: openai.Float(1)})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "presence_penalty" {
		t.Errorf("SDK presence_penalty: %d param %q, want 400 presence_penalty", ae.StatusCode, ae.Param)
	}
}

// TestUnknownMessageFieldRefused: a message field Batcher does not read is
// refused naming it, at the front door and in a batch line (ChatBody);
// null and empty ones, as a response's message sent back carries, are not.
func TestUnknownMessageFieldRefused(t *testing.T) {
	e := newEnv(t, newFake())
	bad := `{"model":"chat","messages":[{"role":"user","content":"x"},{"role":"user","content":"y","bogus":2}]}`
	status, _, body := e.post(t, "/chat/completions", bad)
	if status != http.StatusBadRequest || !strings.Contains(body, `"param":"messages[1].bogus"`) {
		t.Errorf("front door: %d %s; want 400 param messages[1].bogus", status, body)
	}
	if _, ae := openaiapi.ChatBody([]byte(bad)); ae == nil || ae.Param != "messages[1].bogus" {
		t.Errorf("batch line: %v; want an error naming messages[1].bogus", ae)
	}
	ok := `{"model":"chat","messages":[{"role":"user","content":"x"},` +
		`{"role":"assistant","content":"a","refusal":null,"annotations":[],"audio":null,"function_call":null},{"role":"user","content":"y"}]}`
	if status, _, body := e.post(t, "/chat/completions", ok); status != http.StatusOK {
		t.Errorf("history with null fields: %d %s, want 200", status, body)
	}
	if _, ae := openaiapi.ChatBody([]byte(ok)); ae != nil {
		t.Errorf("batch line with null fields: %v", ae)
	}
}

// TestIntegerBeyondInt32: a max_tokens or dimensions past int32 is refused
// naming the range, not "must be at least 1" of a value that is.
func TestIntegerBeyondInt32(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct{ path, body, param string }{
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"}],"max_completion_tokens":99999999999}`, "max_completion_tokens"},
		{"/completions", `{"model":"comp","prompt":"x","max_tokens":99999999999}`, "max_tokens"},
		{"/embeddings", `{"model":"embed","input":"x","dimensions":99999999999}`, "dimensions"},
	} {
		status, _, body := e.post(t, tc.path, tc.body)
		if status != http.StatusBadRequest || !strings.Contains(body, `"param":"`+tc.param+`"`) || !strings.Contains(body, "must be 1 to 2147483647, got 99999999999") {
			t.Errorf("%s: %d %s; want 400 naming %s and its range", tc.path, status, body, tc.param)
		}
	}
}

// TestBatchesCreateUnknownField: POST /v1/batches refuses a field it does
// not read (output_expires_after, a typo) by name, before any job begins.
func TestBatchesCreateUnknownField(t *testing.T) {
	e := newBatchesEnv(t)
	id := e.upload(t, "batch", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`+"\n")
	for _, field := range []string{"output_expires_after", "completion_windw"} {
		code, _, body := e.do(t, http.MethodPost, "/v1/batches", createBody(id, `,"`+field+`":{"seconds":3600}`))
		ae := decodeError(t, body)
		if code != http.StatusBadRequest || strOrNull(ae.Error.Param) != field || !strings.Contains(ae.Error.Message, "input_file_id") {
			t.Errorf("%s: %d %s, want 400 naming it and listing the fields read", field, code, body)
		}
	}
	if len(e.jobs.windows) != 0 {
		t.Errorf("%d jobs begun, want none", len(e.jobs.windows))
	}
	if code, _, body := e.do(t, http.MethodPost, "/v1/batches", createBody(id, `,"metadata":null`)); code != http.StatusOK {
		t.Errorf("null metadata: %d %s", code, body)
	}
}

// TestUnknownNestedFieldRefused: a field Batcher does not read inside one
// of a body's objects (stream_options, a tool and its function, an object
// tool_choice, response_format and its json_schema, a content part and its
// image_url, a tool call and its function) is refused naming its path, at
// the front door and in a batch line, as a top-level or message field is:
// dropping it would answer another request than the one sent. null counts
// as unset; free-form objects (parameters, schema, metadata) are the
// caller's own.
func TestUnknownNestedFieldRefused(t *testing.T) {
	e := newEnv(t, newFake())
	const msg = `"messages":[{"role":"user","content":"x"}]`
	const tool = `{"type":"function","function":{"name":"f","parameters":{"type":"object","x-any":1}}}`
	for _, tc := range []struct{ path, body, param string }{
		{"/chat/completions", `{"model":"chat",` + msg + `,"stream":true,"stream_options":{"include_usage":true,"zz":1}}`, "stream_options.zz"},
		{"/completions", `{"model":"comp","prompt":"x","stream":true,"stream_options":{"include_usage":true,"zz":1}}`, "stream_options.zz"},
		{"/chat/completions", `{"model":"chat",` + msg + `,"tools":[` + tool + `,{"type":"function","zz":1,"function":{"name":"g"}}]}`, "tools[1].zz"},
		{"/chat/completions", `{"model":"chat",` + msg + `,"tools":[{"type":"function","function":{"name":"g","zz":1}}]}`, "tools[0].function.zz"},
		{"/chat/completions", `{"model":"chat",` + msg + `,"tools":[` + tool + `],"tool_choice":{"type":"function","function":{"name":"f","zz":1}}}`, "tool_choice.function.zz"},
		{"/chat/completions", `{"model":"chat",` + msg + `,"response_format":{"type":"json_object","zz":1}}`, "response_format.zz"},
		{"/chat/completions", `{"model":"chat",` + msg + `,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"zz":1}}}`, "response_format.json_schema.zz"},
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}]}`, "messages[0].content[0].cache_control"},
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png","zz":1}}]}]}`, "messages[0].content[0].image_url.zz"},
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"},"zz":1}]},{"role":"tool","tool_call_id":"c","content":"ok"}]}`, "messages[1].tool_calls[0].zz"},
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}","zz":1}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]}`, "messages[1].tool_calls[0].function.zz"},
	} {
		status, _, body := e.post(t, tc.path, tc.body)
		var got struct {
			Error struct{ Message, Param, Type string }
		}
		_ = json.Unmarshal([]byte(body), &got)
		if status != http.StatusBadRequest || got.Error.Param != tc.param || got.Error.Type != "invalid_request_error" {
			t.Errorf("%s %s: %d %s; want 400 invalid_request_error param %q", tc.path, tc.body, status, body, tc.param)
		}
		if tc.path != "/chat/completions" || strings.Contains(tc.body, "stream") {
			continue
		}
		if _, ae := openaiapi.ChatBody([]byte(tc.body)); ae == nil || ae.Param != tc.param {
			t.Errorf("batch line %s: %v; want an error naming %s", tc.body, ae, tc.param)
		}
	}
	ok := `{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":null}]}],` +
		`"stream_options":null,"metadata":{"a":"b"}}`
	if status, _, body := e.post(t, "/chat/completions", ok); status != http.StatusOK {
		t.Errorf("known and null nested fields: %d %s, want 200", status, body)
	}
	// The fake serves no tools: past the fields' check, the backend refuses
	// them whole, so a free-form parameters object passed it.
	tools := `{"model":"chat",` + msg + `,"tools":[` + tool + `],"tool_choice":{"type":"function","function":{"name":"f"}}}`
	if status, _, body := e.post(t, "/chat/completions", tools); status != http.StatusBadRequest || !strings.Contains(body, `"param":"tools"`) {
		t.Errorf("known tool fields: %d %s, want the backend's refusal of tools", status, body)
	}
}

// TestStreamOptionsWithoutStream: stream_options on a request that does not
// stream would be dropped (include_usage asks for a chunk there is no
// stream to carry), so it is refused naming it, as OpenAI refuses it; null
// is unset.
func TestStreamOptionsWithoutStream(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct{ path, body string }{
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`},
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"}],"stream":false,"stream_options":{}}`},
		{"/completions", `{"model":"comp","prompt":"x","stream_options":{"include_usage":true}}`},
	} {
		status, _, body := e.post(t, tc.path, tc.body)
		if status != http.StatusBadRequest || !strings.Contains(body, `"param":"stream_options"`) || !strings.Contains(body, "invalid_request_error") {
			t.Errorf("%s %s: %d %s; want 400 naming stream_options", tc.path, tc.body, status, body)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"}],"stream_options":null}`},
		{"/completions", `{"model":"comp","prompt":"x","stream_options":null}`},
	} {
		if status, _, body := e.post(t, tc.path, tc.body); status != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", tc.path, tc.body, status, body)
		}
	}
}
