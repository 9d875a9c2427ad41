package security

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/batcherhq/batcher/batcher"
)

// AnonymousName is the name of the tenant every caller is when no
// authentication is configured.
const AnonymousName = "anonymous"

// Tenant is an authenticated caller's identity and what it may do. A Tenant
// is immutable: a reload of the tenants file makes new ones, and a request
// keeps the Tenant it was admitted with.
type Tenant struct {
	// Name is unique among the configured tenants: a bounded label.
	Name string
	// Routes the tenant may use; empty: every route.
	Routes []string
	// MaxPriority is the highest priority the tenant may use.
	MaxPriority batcher.Priority
	// PriorityMode says what happens to a request above MaxPriority.
	PriorityMode PriorityMode
	// Weight is the tenant's share in fair queuing (1 to MaxWeight).
	Weight int
	// Admin: the tenant may use the admin API.
	Admin bool
	// Quotas are carried for the core to enforce; this package does not.
	Quotas Quotas
}

// Quotas are a tenant's limits; 0 is none. The core enforces RPM, TPM,
// QueueShare and InFlight (Tenants.Policies hands them to it); Jobs and
// ItemsPerJob are the jobs service's.
type Quotas struct {
	// RPM and TPM: requests and estimated tokens (prompt plus max_tokens)
	// admitted per minute; a bucket of one minute's allowance.
	RPM int `yaml:"rpm"`
	TPM int `yaml:"tpm"`
	// QueueShare: the share (0 to 1) of the core's queue capacity that the
	// tenant's requests without a result may hold.
	QueueShare float64 `yaml:"queue_share"`
	// InFlight: the tenant's requests without a result at once (LiteLLM's
	// parallel requests).
	InFlight int `yaml:"in_flight"`
	// Jobs: the tenant's batch jobs not yet ended.
	Jobs int `yaml:"jobs"`
	// ItemsPerJob: the most items one of the tenant's jobs may hold.
	ItemsPerJob int `yaml:"items_per_job"`
}

// PriorityMode says what happens to a request above its tenant's
// MaxPriority.
type PriorityMode uint8

const (
	// PriorityLower lowers the request to the tenant's MaxPriority.
	PriorityLower PriorityMode = iota
	// PriorityRefuse refuses it with PERMISSION_DENIED (HTTP 403).
	PriorityRefuse
)

func (m PriorityMode) String() string {
	if m == PriorityRefuse {
		return "refuse"
	}
	return "lower"
}

// ErrForbidden is wrapped by the errors of a valid identity's request that
// its tenant may not make: PERMISSION_DENIED, HTTP 403.
var ErrForbidden = errors.New("forbidden")

// anonymous is the tenant of every caller when authentication is off.
var anonymous = &Tenant{Name: AnonymousName, MaxPriority: batcher.PriorityUrgent, Weight: 1, Admin: true}

// unrestricted reports whether t may use every route at every priority:
// the edge checks would pass each of its requests unchanged.
func (t *Tenant) unrestricted() bool {
	return len(t.Routes) == 0 && rank(t.MaxPriority) == rank(batcher.PriorityUrgent)
}

// AllowsRoute reports whether t may use the route.
func (t *Tenant) AllowsRoute(route string) bool {
	return len(t.Routes) == 0 || slices.Contains(t.Routes, route)
}

// CheckRoute returns an error wrapping ErrForbidden when t may not use the
// route. The message names the route the caller gave and the tenant, never
// the routes that exist.
func (t *Tenant) CheckRoute(route string) error {
	if t.AllowsRoute(route) {
		return nil
	}
	return fmt.Errorf("%w: tenant %q may not use route %q", ErrForbidden, t.Name, route)
}

// CapPriority returns p, or t's MaxPriority when p is above it and t's mode
// is PriorityLower; in PriorityRefuse mode a p above the ceiling is an
// error wrapping ErrForbidden.
func (t *Tenant) CapPriority(p batcher.Priority) (batcher.Priority, error) {
	if rank(p) >= rank(t.MaxPriority) {
		return p, nil
	}
	if t.PriorityMode == PriorityRefuse {
		return p, fmt.Errorf("%w: priority %v is above tenant %q's ceiling %v", ErrForbidden, p, t.Name, t.MaxPriority)
	}
	return t.MaxPriority, nil
}

// rank orders priorities: lower is more urgent.
func rank(p batcher.Priority) int {
	switch p {
	case batcher.PriorityUrgent:
		return 0
	case batcher.PriorityHigh:
		return 1
	case batcher.PriorityLow:
		return 3
	case batcher.PriorityDeferrable:
		return 4
	}
	return 2 // normal
}

type tenantKey struct{}

// WithTenant returns a context carrying t.
func WithTenant(ctx context.Context, t *Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantName names the tenant the authentication middleware put into ctx,
// or "" when none did: the tenant function of server.WithTenantFunc and
// openaiapi.WithTenantFunc.
func TenantName(ctx context.Context) string {
	if t := TenantFrom(ctx); t != nil {
		return t.Name
	}
	return ""
}

// TenantFrom returns the tenant the authentication middleware put into ctx,
// or nil when there is none (the call did not pass through it).
func TenantFrom(ctx context.Context) *Tenant {
	t, _ := ctx.Value(tenantKey{}).(*Tenant)
	return t
}
