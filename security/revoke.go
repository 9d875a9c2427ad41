package security

import (
	"context"
	"crypto/tls"
	"slices"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/batcherhq/batcher/batcher"
)

// Revocation of open streams.
//
// A unary call is authenticated once and ends soon. A stream lives as long
// as its caller keeps it, so the credential it was opened with is held in
// a registry (Authenticator.streams) and authenticated again after every
// reload of the tenants or JWKS files and on every poll of the watcher
// (Security.Start; a JWT's expiry is caught there). When the credential no
// longer maps to a tenant, or to one with other rights, the stream's
// revoked channel is closed: its Access (AccessFrom) then refuses new
// requests with batcher.ErrRevoked, and the door (server's SubmitStream)
// finishes what it accepted and ends the stream. A stream whose handler
// never asked for its Access (WatchStats, WatchJob, ListJobResults,
// CreateJob) has nothing to finish: its context is cancelled.

// streamGrant is one open stream's credential and what it was granted.
type streamGrant struct {
	authz   string
	state   *tls.ConnectionState
	tenant  *Tenant
	access  *batcher.Access // tenant's Access with revoked
	revoked chan struct{}   // closed once by Revalidate
	cancel  context.CancelFunc
	// graceful: the handler took the Access (AccessFrom), and so ends the
	// stream itself once what it accepted is done.
	graceful atomic.Bool
}

type grantKey struct{}

// streamInterceptor registers each authenticated stream of a tenant (not
// the anonymous one, whose credential cannot be revoked) for revocation.
func (a *Authenticator) streamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	// The registration has a frame of its own (register), off the stack
	// while the handler runs: a streamed handler waits on it as long as
	// its answer lasts, and every byte of stack under the wait is memory
	// each open stream may hold (server.SubmitStreamed).
	t := TenantFrom(ss.Context())
	if t == nil || t == anonymous {
		return handler(srv, ss)
	}
	g, ctx := a.register(ss.Context(), t)
	defer a.unregister(g)
	return handler(srv, grantStream{ServerStream: ss, ctx: ctx})
}

// register registers a stream of tenant t, whose context is ctx, for
// revocation, and returns its grant and the handler's context.
func (a *Authenticator) register(ctx context.Context, t *Tenant) (*streamGrant, context.Context) {
	g := &streamGrant{tenant: t, revoked: make(chan struct{})}
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		g.authz = v[0]
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			g.state = &ti.State
		}
	}
	g.access = t.Access().WithRevoked(g.revoked)
	ctx, g.cancel = context.WithCancel(ctx)
	a.mu.Lock()
	if a.streams == nil {
		a.streams = map[*streamGrant]struct{}{}
	}
	a.streams[g] = struct{}{}
	a.mu.Unlock()
	return g, context.WithValue(ctx, grantKey{}, g)
}

// unregister forgets g's stream, which has ended, and cancels its context.
func (a *Authenticator) unregister(g *streamGrant) {
	a.mu.Lock()
	delete(a.streams, g)
	a.mu.Unlock()
	g.cancel()
}

type grantStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s grantStream) Context() context.Context { return s.ctx }

// Revalidate authenticates every open stream's credential again against
// the tenants and keys in force, and revokes those that no longer map to
// a tenant with the same rights (name, routes, priority ceiling and mode).
// Security calls it after each reload and poll; it returns how many it
// revoked.
func (a *Authenticator) Revalidate(ctx context.Context) int {
	a.mu.Lock()
	grants := make([]*streamGrant, 0, len(a.streams))
	for g := range a.streams {
		grants = append(grants, g)
	}
	a.mu.Unlock()
	n := 0
	for _, g := range grants {
		select {
		case <-g.revoked:
			continue
		default:
		}
		t, err := a.authenticate(ctx, g.authz, g.state)
		if err == nil && sameRights(t, g.tenant) {
			continue
		}
		a.mu.Lock()
		delete(a.streams, g)
		a.mu.Unlock()
		close(g.revoked)
		if !g.graceful.Load() {
			g.cancel()
		}
		n++
		a.log.InfoContext(ctx, "security: credential of an open stream revoked; the stream ends once what it accepted is done", "tenant", g.tenant.Name)
	}
	return n
}

// sameRights reports whether a stream opened as b may go on as a.
func sameRights(a, b *Tenant) bool {
	return a.Name == b.Name && slices.Equal(a.Routes, b.Routes) && a.MaxPriority == b.MaxPriority &&
		a.PriorityMode == b.PriorityMode && a.Admin == b.Admin
}

// grantFrom returns the revocable grant of ctx's stream, or nil.
func grantFrom(ctx context.Context) *streamGrant {
	g, _ := ctx.Value(grantKey{}).(*streamGrant)
	return g
}

// OpenStreams returns how many streams are registered for revocation.
func (a *Authenticator) OpenStreams() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.streams)
}
