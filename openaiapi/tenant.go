package openaiapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/security"
)

// TypePermission is OpenAI's error type for a valid key that may not do
// what it asked.
const TypePermission = "permission_error"

// TenantOf returns the name of the tenant that ctx's call is made as, or
// "" when it is unscoped: no authentication middleware ran, or batcherd
// has no tenants file (every caller the anonymous tenant). Files and
// batches of a tenant are seen by that tenant only; "" sees everything.
func TenantOf(ctx context.Context) string {
	t := security.TenantFrom(ctx)
	if t == nil || t.Name == security.AnonymousName {
		return ""
	}
	return t.Name
}

// admit admits req for ctx's caller before the core sees it, with the one
// rule every door calls (batcher.Access.Admit, from security.AccessFrom):
// a route it may not use, or a priority above its ceiling in refuse mode,
// is a 403; in lower mode the priority is lowered; the request carries the
// tenant's name for the core's quotas. Without a tenant (no authentication
// middleware, or the anonymous tenant) every request passes.
func admit(ctx context.Context, req *batcher.Request) error {
	return security.AccessFrom(ctx).Admit(req)
}

// forbidden answers an error wrapping security.ErrForbidden: 403 with the
// reason, which names the route or priority the caller gave and its
// tenant, never what exists.
func forbidden(err error) *Error {
	if errors.Is(err, batcher.ErrRevoked) {
		return &Error{Status: http.StatusUnauthorized, Type: TypeAuthentication, Code: "unauthenticated", Message: "unauthenticated"}
	}
	if !errors.Is(err, batcher.ErrForbidden) {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: "forbidden", Message: err.Error()}
}

// modelVisible reports whether ctx's tenant may use the route: /v1/models
// lists only those, and answers 404 for the others as for unknown ones.
func modelVisible(ctx context.Context, route string) bool {
	return security.AccessFrom(ctx).AllowsRoute(route)
}
