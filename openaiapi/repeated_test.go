package openaiapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/openaiapi"
)

// TestRepeatedKeysRefused: a key that an object of a request body repeats
// is a 400 naming its path, on every door that decodes a JSON body: the
// decoder would keep the last value and drop what the caller sent first.
// One row per door.
func TestRepeatedKeysRefused(t *testing.T) {
	seam := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			InputFileID string `json:"input_file_id"`
		}
		if e := openaiapi.DecodeJSON(w, r, &body, 1<<10, 8); e != nil {
			openaiapi.WriteError(w, e)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	e := newEnv(t, newFake(), withHandler(openaiapi.WithBatches(seam)))
	batches := newBatchesEnv(t)
	for _, tc := range []struct{ door, path, body, param string }{
		{"chat", "/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"a","content":"b"}]}`, "messages[0].content"},
		{"chat top level", "/chat/completions", `{"model":"chat","model":"other","messages":[{"role":"user","content":"a"}]}`, "model"},
		{"chat free-form", "/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"a"}],"metadata":{"k":"1","k":"2"}}`, "metadata.k"},
		{"chat escaped", "/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"a"},{"role":"user","\u0063ontent":"b","content":"c"}]}`, "messages[1].content"},
		{"completions", "/completions", `{"model":"comp","prompt":"x","max_tokens":5,"max_tokens":500}`, "max_tokens"},
		{"embeddings", "/embeddings", `{"model":"embed","input":"x","input":["y","z"]}`, "input"},
		{"DecodeJSON", "/batches", `{"input_file_id":"file-1","input_file_id":"file-2"}`, "input_file_id"},
		{"batches", "", createBody("file-1", `,"metadata":{"team":"a","team":"b"}`), "metadata.team"},
	} {
		var code int
		var body string
		if tc.path == "" {
			code, _, body = batches.do(t, http.MethodPost, "/v1/batches", tc.body)
		} else {
			code, _, body = e.post(t, tc.path, tc.body)
		}
		ae := decodeError(t, body)
		if code != http.StatusBadRequest || strOrNull(ae.Error.Param) != tc.param || !strings.Contains(ae.Error.Message, "given more than once") {
			t.Errorf("%s: %d %s; want 400 naming %s", tc.door, code, body, tc.param)
		}
	}
	if n := e.fake.calls.Load(); n != 0 {
		t.Errorf("the backend was called %d times for refused calls", n)
	}
	if len(batches.jobs.windows) != 0 {
		t.Errorf("%d jobs begun, want none", len(batches.jobs.windows))
	}
	// A batch line's body, read by the front door's decoder.
	if _, ae := openaiapi.ChatBody([]byte(`{"model":"chat","messages":[{"role":"user","content":"a"}],"temperature":0,"temperature":1}`)); ae == nil || ae.Param != "temperature" {
		t.Errorf("batch line: %v; want a 400 naming temperature", ae)
	}
	// Keys alike but for case, or alike in different objects, are not repeats.
	for _, ok := range []string{
		`{"model":"chat","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"metadata":{"k":"1","K":"2"}}`,
		`{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
	} {
		if code, _, body := e.post(t, "/chat/completions", ok); code != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", ok, code, body)
		}
	}
}

// TestRepeatedKeyAfterMalformedJSON: a body that is malformed is described
// as malformed, even where a key repeats before the fault.
func TestRepeatedKeyAfterMalformedJSON(t *testing.T) {
	e := newEnv(t, newFake())
	code, _, body := e.post(t, "/chat/completions", `{"model":"chat","model":"x","messages":[}`)
	var ae batchAPIError
	_ = json.Unmarshal([]byte(body), &ae)
	if code != http.StatusBadRequest || !strings.Contains(ae.Error.Message, "malformed JSON at line 1") {
		t.Errorf("%d %s; want 400 malformed JSON", code, body)
	}
}

// TestCaseFoldedKeysRefused: encoding/json matches a field's name in any
// case, so "Model" beside "model" would silently replace the model, and
// "Content" alone would be read as the content while also carried upstream
// as a field of its own. Every door refuses such a key, naming it.
func TestCaseFoldedKeysRefused(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct{ door, path, body, param string }{
		{"chat top level", "/chat/completions", `{"model":"chat","Model":"other","messages":[{"role":"user","content":"a"}]}`, "Model"},
		{"chat message", "/chat/completions", `{"model":"chat","messages":[{"role":"user","Content":"a"}]}`, "messages[0].Content"},
		{"chat nested", "/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"a"}],"stream":true,"stream_options":{"Include_Usage":true}}`, "stream_options.Include_Usage"},
		{"completions", "/completions", `{"model":"comp","prompt":"x","Max_Tokens":5}`, "Max_Tokens"},
		{"embeddings", "/embeddings", `{"model":"embed","Input":"x"}`, "Input"},
	} {
		code, _, body := e.post(t, tc.path, tc.body)
		ae := decodeError(t, body)
		if code != http.StatusBadRequest || strOrNull(ae.Error.Param) != tc.param {
			t.Errorf("%s: %d %s; want 400 naming %s", tc.door, code, body, tc.param)
		}
	}
	if n := e.fake.calls.Load(); n != 0 {
		t.Errorf("the backend was called %d times for refused calls", n)
	}
	// A batch line's body, read by the front door's decoder.
	if _, ae := openaiapi.ChatBody([]byte(`{"model":"chat","Temperature":1,"messages":[{"role":"user","content":"a"}]}`)); ae == nil || ae.Param != "Temperature" {
		t.Errorf("batch line: %v; want a 400 naming Temperature", ae)
	}
}
