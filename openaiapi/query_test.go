package openaiapi_test

import (
	"net/http"
	"strings"
	"testing"
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
