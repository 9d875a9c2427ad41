package batcher

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Admission: what a tenant may ask of the core.
//
// Access is the one rule about who may do what, written on the core's
// types so that every door calls the same function: Submit and
// SubmitStream (after they translate the wire), the OpenAI-compatible front
// door, and the jobs creator for each item and each route a job's spec
// names. A door finds the caller's *Access (batcherd: from the
// authentication layer) and calls Admit before the core, or the job store,
// sees anything.

// ErrForbidden: a valid identity asked for something its tenant may not
// do: a route outside its routes, or a priority above its ceiling in
// PriorityRefuse mode. PERMISSION_DENIED, HTTP 403. The error is an
// *AccessError.
var ErrForbidden = errors.New("forbidden")

// ErrRevoked: the credential the call was admitted with has been revoked
// since (a reload removed its token, its tenant or its JWT's key, or the
// JWT expired). UNAUTHENTICATED, HTTP 401.
var ErrRevoked = errors.New("credential revoked")

// PriorityMode says what happens to a request above its tenant's
// MaxPriority.
type PriorityMode uint8

const (
	// PriorityLower lowers the request to the tenant's MaxPriority.
	PriorityLower PriorityMode = iota
	// PriorityRefuse refuses it with ErrForbidden.
	PriorityRefuse
)

func (m PriorityMode) String() string {
	if m == PriorityRefuse {
		return "refuse"
	}
	return "lower"
}

// Access is what one tenant may ask of the core. A nil *Access admits
// everything and names no tenant: batcherd without a tenants file. An
// Access is immutable once a door holds it.
type Access struct {
	// Tenant names the tenant; Admit stamps it on each request
	// (Request.Tenant), so that the core's weights and quotas (SetTenants:
	// rpm, tpm, queue_share, in_flight) apply to it.
	Tenant string
	// Routes the tenant may use; empty: every route.
	Routes []string
	// MaxPriority is the most urgent priority the tenant may use. The zero
	// value is PriorityNormal; PriorityUrgent allows every priority.
	MaxPriority Priority
	// PriorityMode: what happens to a request above MaxPriority.
	PriorityMode PriorityMode
	// Revoked, when not nil, is closed once the credential this Access was
	// granted to is revoked: Admit then refuses with ErrRevoked, and a
	// door that holds a stream open ends it once what it accepted is done.
	Revoked <-chan struct{}
}

// AccessError is the error of a request that its Access refuses. It
// wraps ErrForbidden. Its message names the route or priority the caller
// gave and its tenant, never the routes that exist.
type AccessError struct {
	Tenant   string
	Route    string   // the refused route, or ""
	Priority Priority // the refused priority, when Route is ""
	Max      Priority // the tenant's ceiling, when Route is ""
}

func (e *AccessError) Error() string {
	if e.Route != "" {
		return fmt.Sprintf("forbidden: tenant %s may not use route %s", strconv.Quote(e.Tenant), strconv.Quote(e.Route))
	}
	return fmt.Sprintf("forbidden: priority %v is above tenant %s's ceiling %v", e.Priority, strconv.Quote(e.Tenant), e.Max)
}

// Unwrap makes errors.Is(err, ErrForbidden) hold.
func (e *AccessError) Unwrap() error { return ErrForbidden }

// Admit applies a to req before the core sees it: a revoked credential is
// ErrRevoked; a route the tenant may not use, or a priority above its
// ceiling in PriorityRefuse mode, is an *AccessError (ErrForbidden); in
// PriorityLower mode the priority is lowered to the ceiling. On success req
// carries a's tenant. A nil a admits req unchanged.
//
// Every door calls Admit for every request it lets in; no door checks a
// route or a priority any other way.
func (a *Access) Admit(req *Request) error {
	if a == nil {
		return nil
	}
	if err := a.check(req.Route, &req.Priority); err != nil {
		return err
	}
	req.Tenant = a.Tenant
	return nil
}

// Admit is a.Admit(req) for a door in front of b: a refusal is counted as
// a rejection (batcher.requests.rejected, reason forbidden or revoked), as
// Submit's own are, so that an operator sees every request refused, not
// only those Submit refused. Doors call it rather than Access.Admit for
// every request they let in; a door that refuses a whole job's spec
// (jobs) refuses no request and calls Access.Admit.
func (b *Batcher) Admit(a *Access, req *Request) error {
	err := a.Admit(req)
	if err != nil && b.metrics != nil {
		b.metrics.refused(b.metrics.rejected, req, err)
	}
	return err
}

// check is Admit's rule on a route and a priority, lowering *p in place
// in PriorityLower mode.
func (a *Access) check(route string, p *Priority) error {
	if a.Revoked != nil {
		select {
		case <-a.Revoked:
			return ErrRevoked
		default:
		}
	}
	if !a.AllowsRoute(route) {
		return &AccessError{Tenant: a.Tenant, Route: route}
	}
	capped, err := a.CapPriority(*p)
	*p = capped
	return err
}

// CapPriority is Admit's priority rule alone, for a door that fixes a
// priority before it has requests (a job's spec): p, or a's MaxPriority
// when p is above it in PriorityLower mode; an *AccessError in
// PriorityRefuse mode. A nil a returns p.
func (a *Access) CapPriority(p Priority) (Priority, error) {
	if a == nil || int(p) >= numPriorities || p.level() >= a.MaxPriority.level() {
		return p, nil // an unknown priority is Validate's to refuse
	}
	if a.PriorityMode == PriorityRefuse {
		return p, &AccessError{Tenant: a.Tenant, Priority: p, Max: a.MaxPriority}
	}
	return a.MaxPriority, nil
}

// AllowsRoute reports whether a may use the route, without revocation or
// priority: what a door lists (the front door's /v1/models). A nil a
// allows every route.
func (a *Access) AllowsRoute(route string) bool {
	return a == nil || len(a.Routes) == 0 || slices.Contains(a.Routes, route)
}

// Unrestricted reports whether Admit can only stamp the tenant: every
// route at every priority, and a credential that cannot be revoked.
func (a *Access) Unrestricted() bool {
	return a == nil || len(a.Routes) == 0 && a.MaxPriority == PriorityUrgent && a.Revoked == nil
}

// WithRevoked returns a copy of a whose Revoked is ch: the Access of one
// credential that may be revoked while a stream holds it. A nil a stays
// nil.
func (a *Access) WithRevoked(ch <-chan struct{}) *Access {
	if a == nil {
		return nil
	}
	c := *a
	c.Revoked = ch
	return &c
}
