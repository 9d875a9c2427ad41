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
