package jobs

import (
	"context"
	"fmt"

	"github.com/batcherhq/batcher/batcher"
)

// Tenant is who makes a call of the Manager, and the quotas its jobs are
// held to. A call whose context carries no Tenant (WithTenant) is
// unscoped: it sees every job, owns what it creates as no tenant, and has
// no quota but the Manager's own limits. That is batcherd without a
// tenants file; with one, every call carries its caller's Tenant.
type Tenant struct {
	// Name owns the jobs the tenant creates; it sees no other job. Must
	// not be empty.
	Name string
	// MaxJobs bounds the tenant's jobs not yet ended; 0: no bound.
	MaxJobs int
	// MaxItems bounds a job's inputs; 0: only Config.MaxItems.
	MaxItems int64
	// Access is what the tenant may ask of the core: Begin admits the
	// spec's routes and priority with it, and Add every item's routes
	// (batcher.Access.Admit), so that a job naming a route the tenant may
	// not use is refused whole, with batcher.ErrForbidden, before anything
	// runs. nil: every route at every priority.
	Access *batcher.Access
}

type tenantKey struct{}

// WithTenant returns a context whose Manager calls act as t: they see
// only t's jobs, another tenant's job is ErrNotFound as if it did not
// exist, and the jobs t creates are t's and count against its quotas. An
// empty t.Name leaves ctx unscoped.
func WithTenant(ctx context.Context, t Tenant) context.Context {
	if t.Name == "" {
		return ctx
	}
	return context.WithValue(ctx, tenantKey{}, t)
}

// tenantOf returns the Tenant ctx carries, and whether it carries one.
func tenantOf(ctx context.Context) (Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(Tenant)
	return t, ok
}

// visible returns j, or ErrNotFound, worded as for an unknown id, when ctx
// is scoped to a tenant other than j's.
func visible(ctx context.Context, j *Job) (*Job, error) {
	if t, ok := tenantOf(ctx); ok && t.Name != j.Tenant {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, j.ID)
	}
	return j, nil
}
