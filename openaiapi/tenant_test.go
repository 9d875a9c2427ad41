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
