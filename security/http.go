package security

import (
	"net/http"
)

// HTTPMiddleware authenticates every request as the gRPC interceptors do
// and passes it on with the Tenant in its context (TenantFrom). A refused
// request gets 401 with a WWW-Authenticate challenge and a body, in the
// OpenAI error shape, that says no more than "unauthenticated".
func (a *Authenticator) HTTPMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := a.authenticate(r.Context(), r.Header.Get("Authorization"), r.TLS)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="batcher"`)
			writeHTTPError(w, http.StatusUnauthorized, "unauthenticated", "invalid_request_error", "invalid_api_key")
			return
		}
		next.ServeHTTP(w, r.WithContext(WithTenant(r.Context(), t)))
	})
}

// RequireAdmin answers 403 to a request whose tenant lacks the admin right.
// Put it inside HTTPMiddleware, on the admin listener's handlers.
func RequireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !TenantFrom(r.Context()).AdminFrom(r.RemoteAddr) {
			writeHTTPError(w, http.StatusForbidden, "the admin right is needed", "permission_error", "forbidden")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeHTTPError writes {"error":{"message":...,"type":...,"param":null,
// "code":...}}, the whole of OpenAI's error object, as the front door's
// own errors are (openaiapi.WriteError): an SDK reading code or param
// finds them. message, typ and errCode are constants of this package, so
// no escaping is needed.
func writeHTTPError(w http.ResponseWriter, code int, message, typ, errCode string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(`{"error":{"message":"` + message + `","type":"` + typ + `","param":null,"code":"` + errCode + `"}}` + "\n"))
}
