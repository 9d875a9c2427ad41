package openaiapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/openaiapi"
)

// tenantHeader names the tenant a test call is made as: withTenants'
// access function reads it from the context tenantURL's server puts it in.
const tenantHeader = "X-Test-Tenant"

type tenantCtxKey struct{}

// withTenants admits each call served through tenantURL as the tenant its
// tenantHeader names, with access's other fields; a call without one is
// unscoped (nil Access).
func withTenants(access batcher.Access) envOption {
	return withHandler(openaiapi.WithAccessFunc(func(ctx context.Context) *batcher.Access {
		name, _ := ctx.Value(tenantCtxKey{}).(string)
		if name == "" {
			return nil
		}
		a := access
		a.Tenant = name
		return &a
	}))
}

// tenantURL serves e's handler with each call's tenantHeader in its
// context, as batcherd's authentication layer puts the caller's identity
// there, and returns its base URL, ".../v1".
func (e *env) tenantURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantCtxKey{}, r.Header.Get(tenantHeader))))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// send makes one call to url and returns the status, headers and body;
// header is name, value pairs.
func send(t *testing.T, method, url, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestPriorityAboveCeilingNamesItsCarrier: a priority above the tenant's
// ceiling (refuse mode) is a 403 whose param names what carried it: the
// X-Batcher-Priority header when given (it overrides service_tier),
// service_tier when that set it, and the header, the way to choose one,
// when neither did; on every endpoint, streamed or not.
func TestPriorityAboveCeilingNamesItsCarrier(t *testing.T) {
	e := newEnv(t, newFake(), withTenants(batcher.Access{MaxPriority: batcher.PriorityLow, PriorityMode: batcher.PriorityRefuse}))
	url := e.tenantURL(t)
	chat := `{"model": "chat", "messages": [{"role": "user", "content": "hi"}]%s}`
	for _, tc := range []struct {
		name, path, body string
		header           []string
		param            string
	}{
		{"chat header", "/chat/completions", strings.Replace(chat, "%s", "", 1), []string{openaiapi.PriorityHeader, "urgent"}, openaiapi.PriorityHeader},
		{"chat header over tier", "/chat/completions", strings.Replace(chat, "%s", `, "service_tier": "flex"`, 1), []string{openaiapi.PriorityHeader, "high"}, openaiapi.PriorityHeader},
		{"chat tier", "/chat/completions", strings.Replace(chat, "%s", `, "service_tier": "priority"`, 1), nil, "service_tier"},
		{"chat default", "/chat/completions", strings.Replace(chat, "%s", "", 1), nil, openaiapi.PriorityHeader},
		{"chat streamed tier", "/chat/completions", strings.Replace(chat, "%s", `, "stream": true, "service_tier": "default"`, 1), nil, "service_tier"},
		{"chat streamed header", "/chat/completions", strings.Replace(chat, "%s", `, "stream": true`, 1), []string{openaiapi.PriorityHeader, "normal"}, openaiapi.PriorityHeader},
		{"completions tier", "/completions", `{"model": "comp", "prompt": ["a", "b"], "service_tier": "priority"}`, nil, "service_tier"},
		{"completions streamed header", "/completions", `{"model": "comp", "prompt": "a", "stream": true}`, []string{openaiapi.PriorityHeader, "high"}, openaiapi.PriorityHeader},
		{"embeddings header", "/embeddings", `{"model": "embed", "input": "a"}`, []string{openaiapi.PriorityHeader, "urgent"}, openaiapi.PriorityHeader},
	} {
		header := append([]string{tenantHeader, "t"}, tc.header...)
		code, _, body := send(t, http.MethodPost, url+tc.path, tc.body, header...)
		if code != http.StatusForbidden || !strings.Contains(body, `"param":"`+tc.param+`"`) || !strings.Contains(body, "ceiling") {
			t.Errorf("%s: %d %s; want 403 with param %s", tc.name, code, body, tc.param)
		}
		checkErrorShape(t, body)
	}
	// At the ceiling the call is served.
	code, _, body := send(t, http.MethodPost, url+"/chat/completions", strings.Replace(chat, "%s", `, "service_tier": "flex"`, 1), tenantHeader, "t")
	if code != http.StatusOK {
		t.Errorf("flex at a low ceiling: %d %s", code, body)
	}
}

// TestForbiddenRouteNamesModel: a route the tenant may not use is a 403
// whose param is model, the field that named it, on every endpoint,
// streamed or not, as a priority above the ceiling names its carrier. It
// once had a null param.
func TestForbiddenRouteNamesModel(t *testing.T) {
	e := newEnv(t, newFake(), withTenants(batcher.Access{Routes: []string{"chat"}}))
	url := e.tenantURL(t)
	for _, tc := range []struct{ name, path, body string }{
		{"chat", "/chat/completions", `{"model": "comp", "messages": [{"role": "user", "content": "hi"}]}`},
		{"chat streamed", "/chat/completions", `{"model": "comp", "stream": true, "messages": [{"role": "user", "content": "hi"}]}`},
		{"completions", "/completions", `{"model": "comp", "prompt": ["a", "b"]}`},
		{"completions streamed", "/completions", `{"model": "comp", "prompt": "a", "stream": true}`},
		{"embeddings", "/embeddings", `{"model": "embed", "input": "a"}`},
	} {
		code, _, body := send(t, http.MethodPost, url+tc.path, tc.body, tenantHeader, "t")
		if code != http.StatusForbidden || !strings.Contains(body, `"param":"model"`) || !strings.Contains(body, "may not use route") {
			t.Errorf("%s: %d %s; want 403 with param model", tc.name, code, body)
		}
		checkErrorShape(t, body)
	}
}
