package openaiapi

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/batcherhq/batcher/batcher"
)

// TypePermission is OpenAI's error type for a valid key that may not do
// what it asked.
const TypePermission = "permission_error"

// TenantOf returns the name of the tenant that ctx's call is made as, or
// "" when it is unscoped: no authentication middleware ran, or batcherd
// has no tenants file (every caller the anonymous tenant). Files and
// batches of a tenant are seen by that tenant only; "" sees everything.
func TenantOf(ctx context.Context) string {
	if a := accessOf(ctx); a != nil {
		return a.Tenant
	}
	return ""
}

// accessKey is the context key of the call's Access (WithAccessFunc).
type accessKey struct{}

// withAccess returns r with its caller's Access in its context, taken once
// from the access function; r itself without one.
func (h *Handler) withAccess(r *http.Request) *http.Request {
	if h.cfg.access == nil {
		return r
	}
	a := h.cfg.access(r.Context())
	if a == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), accessKey{}, a))
}

// accessOf returns the Access of ctx's call, or nil: everything allowed.
func accessOf(ctx context.Context) *batcher.Access {
	a, _ := ctx.Value(accessKey{}).(*batcher.Access)
	return a
}

// admit admits req for ctx's caller before the core sees it, with the one
// rule every door calls (batcher.Access.Admit, from WithAccessFunc):
// a route it may not use, or a priority above its ceiling in refuse mode,
// is a 403; in lower mode the priority is lowered; the request carries the
// tenant's name for the core's quotas. Without a tenant (no authentication
// middleware, or the anonymous tenant) every request passes.
//
// A route refused is a 403 whose param is model; a priority refused one
// whose param is priorityParam, what carried it (see priorityParam).
//
// It also gives req its HTTP connection (connOf), for the lane cap's fair
// share per connection within a tenant, as the gRPC doors give theirs.
func admit(ctx context.Context, core *batcher.Batcher, req *batcher.Request, priorityParam string) error {
	if req.Conn == nil {
		req.Conn = connOf(ctx)
	}
	if err := core.Admit(accessOf(ctx), req); err != nil {
		return refusal(err, priorityParam)
	}
	return nil
}

// refusal is admit's error for err: a route refused names the model
// param, a priority refused priorityParam.
func refusal(err error, priorityParam string) error {
	var ae *batcher.AccessError
	if !errors.As(err, &ae) {
		return err
	}
	param := "model"
	if ae.Route == "" {
		param = priorityParam
	}
	return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: "forbidden", Param: param, Message: err.Error()}
}

// priorityParam names what set a call's priority, for the param of its
// refusal: the priority header when given (it overrides service_tier),
// else service_tier when given, else the header, which is how the caller
// chooses one.
func priorityParam(r *http.Request, tier string) string {
	if tier != "" && r.Header.Get(PriorityHeader) == "" {
		return "service_tier"
	}
	return PriorityHeader
}

// connKey is the context key of the caller's HTTP connection.
type connKey struct{}

// remoteAddr names an HTTP connection by its remote address (host:port,
// http.Request.RemoteAddr): every request on one keep-alive connection, or
// one HTTP/2 connection, carries the same one.
type remoteAddr string

func (a remoteAddr) Network() string { return "tcp" }
func (a remoteAddr) String() string  { return string(a) }

// withConn returns r with its connection in its context, for admit.
func withConn(r *http.Request) *http.Request {
	if r.RemoteAddr == "" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), connKey{}, remoteAddr(r.RemoteAddr)))
}

// connOf returns the HTTP connection ctx's call came on, or nil.
func connOf(ctx context.Context) net.Addr {
	if a, ok := ctx.Value(connKey{}).(remoteAddr); ok {
		return a
	}
	return nil
}

// forbidden answers an error wrapping batcher.ErrForbidden: 403 with the
// reason, which names the route or priority the caller gave and its
// tenant, never what exists.
func forbidden(err error) *Error {
	if errors.Is(err, batcher.ErrRevoked) {
		return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: "invalid_api_key", Message: "unauthenticated"}
	}
	if !errors.Is(err, batcher.ErrForbidden) {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: "forbidden", Message: err.Error()}
}

// modelVisible reports whether ctx's tenant may use the route: /v1/models
// lists only those, and answers 404 for the others as for unknown ones.
func modelVisible(ctx context.Context, route string) bool {
	return accessOf(ctx).AllowsRoute(route)
}
