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

// admit applies the caller's tenant to req before the core sees it: a
// route it may not use, or a priority above its ceiling in refuse mode, is
// a 403; in lower mode the priority is lowered. Without a tenant (no
// authentication middleware) every request passes.
func admit(ctx context.Context, req *batcher.Request) error {
	t := security.TenantFrom(ctx)
	if t == nil {
		return nil
	}
	if err := t.CheckRoute(req.Route); err != nil {
		return err
	}
	p, err := t.CapPriority(req.Priority)
	if err != nil {
		return err
	}
	req.Priority = p
	return nil
}

// forbidden answers an error wrapping security.ErrForbidden: 403 with the
// reason, which names the route or priority the caller gave and its
// tenant, never what exists.
func forbidden(err error) *Error {
	if !errors.Is(err, security.ErrForbidden) {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: "forbidden", Message: err.Error()}
}

// modelVisible reports whether ctx's tenant may use the route: /v1/models
// lists only those, and answers 404 for the others as for unknown ones.
func modelVisible(ctx context.Context, route string) bool {
	t := security.TenantFrom(ctx)
	return t == nil || t.AllowsRoute(route)
}
