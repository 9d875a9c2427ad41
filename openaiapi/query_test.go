package openaiapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestQueryParametersRefusedByName: a query parameter an endpoint does not
// read is a 400 naming it, on every endpoint, as an unknown field of a body
// is: never dropped (a typo such as limt=5 listed the default page as if
// it had been read).
func TestQueryParametersRefusedByName(t *testing.T) {
	e := newEnv(t, newFake())
	for _, tc := range []struct{ method, path, body, param, msg string }{
		{http.MethodPost, "/chat/completions?foo=1", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`, "foo", "POST /v1/chat/completions takes no query parameters"},
		{http.MethodPost, "/embeddings?dimensions=8", `{"model":"embed","input":"hi"}`, "dimensions", "takes no query parameters"},
		{http.MethodGet, "/models?owned_by=me", "", "owned_by", "takes no query parameters"},
		{http.MethodGet, "/files/file-000000000000000000000000?x=1", "", "x", "GET /v1/files/file-000000000000000000000000 takes no query parameters"},
		{http.MethodGet, "/files?limt=5", "", "limt", "GET /v1/files takes purpose, limit, order and after"},
	} {
		code, _, body := send(t, tc.method, e.url+tc.path, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"param":"`+tc.param+`"`) || !strings.Contains(body, tc.msg) {
			t.Errorf("%s %s: %d %s; want 400 with param %s and %q", tc.method, tc.path, code, body, tc.param, tc.msg)
		}
		checkErrorShape(t, body)
	}
	if n := e.fake.calls.Load(); n != 0 {
		t.Errorf("the backend was called %d times for refused calls", n)
	}
}

// TestBatchesQueryAndMethods: the Batch API reads limit and after on its
// list and no query elsewhere, refusing any other parameter by name; a
// path it serves answers another method 405 with Allow, as every other
// endpoint does, and an unknown path 404.
func TestBatchesQueryAndMethods(t *testing.T) {
	e := newBatchesEnv(t)
	for _, tc := range []struct{ method, path, param, msg string }{
		{http.MethodGet, "/v1/batches?limt=5", "limt", "GET /v1/batches takes limit and after"},
		{http.MethodGet, "/v1/batches?limit=1&limit=2", "limit", "once"},
		{http.MethodGet, "/v1/batches/b1?expand=x", "expand", "takes no query parameters"},
		{http.MethodPost, "/v1/batches/b1/cancel?force=1", "force", "takes no query parameters"},
	} {
		code, _, body := e.do(t, tc.method, tc.path, "")
		if ae := decodeError(t, body); code != http.StatusBadRequest || strOrNull(ae.Error.Param) != tc.param || !strings.Contains(ae.Error.Message, tc.msg) {
			t.Errorf("%s %s: %d %s; want 400 with param %s and %q", tc.method, tc.path, code, body, tc.param, tc.msg)
		}
	}
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/v1/batches/b1", "GET"},
		{http.MethodPatch, "/v1/batches", "GET, POST"},
		{http.MethodGet, "/v1/batches/b1/cancel", "POST"},
	} {
		code, h, body := e.do(t, tc.method, tc.path, "")
		if code != http.StatusMethodNotAllowed || h.Get("Allow") != tc.allow || !strings.Contains(body, `"code":"method_not_allowed"`) {
			t.Errorf("%s %s: %d Allow %q %s; want 405 with Allow %q", tc.method, tc.path, code, h.Get("Allow"), body, tc.allow)
		}
	}
	if code, _, body := e.do(t, http.MethodGet, "/v1/batches/b1/results/x", ""); code != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_url"`) {
		t.Errorf("unknown path: %d %s; want 404 unknown_url", code, body)
	}
}

// TestAPIVersionAccepted: api-version, which Azure-style clients send on
// every call, is accepted and ignored on every endpoint, alone or beside
// the parameters a list reads; given twice it is refused as any parameter
// is, and the others are still refused by name beside it.
func TestAPIVersionAccepted(t *testing.T) {
	e := newEnv(t, newFake())
	const v = "api-version=2024-10-21"
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/chat/completions?" + v, `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodPost, "/embeddings?" + v, `{"model":"embed","input":"hi"}`},
		{http.MethodGet, "/models?" + v, ""},
		{http.MethodGet, "/files?limit=5&" + v, ""},
	} {
		if code, _, body := send(t, tc.method, e.url+tc.path, tc.body); code != http.StatusOK {
			t.Errorf("%s %s: %d %s, want 200", tc.method, tc.path, code, body)
		}
	}
	for _, tc := range []struct{ path, param, msg string }{
		{"/models?" + v + "&api-version=2025-01-01", "api-version", "once"},
		{"/models?" + v + "&owned_by=me", "owned_by", "takes no query parameters (api-version is accepted and ignored)"},
	} {
		code, _, body := send(t, http.MethodGet, e.url+tc.path, "")
		if code != http.StatusBadRequest || !strings.Contains(body, `"param":"`+tc.param+`"`) || !strings.Contains(body, tc.msg) {
			t.Errorf("GET %s: %d %s; want 400 with param %s and %q", tc.path, code, body, tc.param, tc.msg)
		}
	}
	// As an SDK configured for Azure's query sends it.
	_, err := e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}},
		option.WithQuery("api-version", "2024-10-21"))
	if err != nil {
		t.Errorf("SDK call with api-version: %v", err)
	}
	b := newBatchesEnv(t)
	if code, _, body := b.do(t, http.MethodGet, "/v1/batches?limit=1&"+v, ""); code != http.StatusOK {
		t.Errorf("GET /v1/batches with api-version: %d %s, want 200", code, body)
	}
}
