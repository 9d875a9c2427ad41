package security

import (
	"context"
	"net"

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

	access *batcher.Access // built by ParseTenants from the fields above
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
// MaxPriority: batcher.PriorityLower or batcher.PriorityRefuse.
type PriorityMode = batcher.PriorityMode

// The priority modes, as the core names them.
const (
	PriorityLower  = batcher.PriorityLower
	PriorityRefuse = batcher.PriorityRefuse
)

// ErrForbidden is wrapped by the errors of a valid identity's request that
// its tenant may not make: PERMISSION_DENIED, HTTP 403. It is the core's
// batcher.ErrForbidden: the rule is batcher.Access.Admit.
var ErrForbidden = batcher.ErrForbidden

// anonymous is the tenant of every caller when authentication is off.
var anonymous = &Tenant{Name: AnonymousName, MaxPriority: batcher.PriorityUrgent, Weight: 1, Admin: true}

// Access returns what t may ask of the core, for every door to admit its
// requests with (batcher.Access.Admit): its routes, priority ceiling and
// mode, and its name, which the core's quotas and weights go by. The
// anonymous tenant's is nil: everything is admitted, under no tenant. The
// result is shared; do not change it.
func (t *Tenant) Access() *batcher.Access {
	if t == nil || t == anonymous {
		return nil
	}
	if t.access != nil {
		return t.access
	}
	return t.newAccess() // a Tenant not made by ParseTenants
}

func (t *Tenant) newAccess() *batcher.Access {
	return &batcher.Access{Tenant: t.Name, Routes: t.Routes, MaxPriority: t.MaxPriority, PriorityMode: t.PriorityMode}
}

// AdminFrom reports whether t has the admin right for a call from the
// remote address addr ("host:port"). The anonymous tenant (no tenants
// file) has it from loopback only: an address that --insecure opened to
// the network serves no admin call to callers nobody authenticated.
func (t *Tenant) AdminFrom(addr string) bool {
	if t == nil || !t.Admin {
		return false
	}
	return t != anonymous || LoopbackAddr(addr)
}

// LoopbackAddr reports whether addr ("host:port" or a bare IP) is a
// loopback address.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AllowsRoute reports whether t may use the route.
func (t *Tenant) AllowsRoute(route string) bool { return t.Access().AllowsRoute(route) }

type tenantKey struct{}

// WithTenant returns a context carrying t.
func WithTenant(ctx context.Context, t *Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantFrom returns the tenant the authentication middleware put into ctx,
// or nil when there is none (the call did not pass through it).
func TenantFrom(ctx context.Context) *Tenant {
	t, _ := ctx.Value(tenantKey{}).(*Tenant)
	return t
}

// AccessFrom returns what ctx's caller may ask of the core (Tenant.Access
// of TenantFrom), for every door to admit its requests with
// (batcher.Access.Admit): nil, which admits everything, when the call did
// not pass through the authentication middleware or its caller is the
// anonymous tenant. The access function of server.WithAccessFunc and
// openaiapi.WithAccessFunc.
//
// On a stream of a tenant, the Access carries a Revoked channel, closed
// once a reload revokes the stream's credential (revoke.go): the door
// that takes it refuses new requests from then on and ends the stream
// once what it accepted is done.
func AccessFrom(ctx context.Context) *batcher.Access {
	if g := grantFrom(ctx); g != nil {
		g.graceful.Store(true)
		return g.access
	}
	return TenantFrom(ctx).Access()
}
