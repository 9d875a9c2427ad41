package security

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// statusUnauthenticated is the one status a refused gRPC credential gets.
var statusUnauthenticated = status.Error(codes.Unauthenticated, "unauthenticated")

// AuthFunc authenticates a gRPC call for go-grpc-middleware's auth
// interceptor: it reads the authorization metadata and the peer's TLS state
// and returns a context carrying the Tenant (TenantFrom), or
// UNAUTHENTICATED with no detail.
func (a *Authenticator) AuthFunc(ctx context.Context) (context.Context, error) {
	if a.tenants.Load() == nil { // no tenants file: everyone is anonymous, as authenticate has it
		return WithTenant(ctx, anonymous), nil
	}
	// One value, not FromIncomingContext's copy of every header.
	var authz string
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		authz = v[0]
	}
	var info *credentials.TLSInfo
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			info = &ti
		}
	}
	var t *Tenant
	var err error
	if info != nil {
		t, err = a.authenticate(ctx, authz, &info.State)
	} else {
		t, err = a.authenticate(ctx, authz, nil)
	}
	if err != nil {
		return nil, statusUnauthenticated
	}
	return WithTenant(ctx, t), nil
}

// needsAuth is every method but health checks, which load balancers call
// without credentials.
func needsAuth(_ context.Context, c interceptors.CallMeta) bool {
	return c.Service != healthpb.Health_ServiceDesc.ServiceName
}

// UnaryInterceptors returns, in order, authentication (health checks
// exempt) and the edge checks of Submit (see StreamInterceptors).
func (a *Authenticator) UnaryInterceptors() []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{
		selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(a.AuthFunc), selector.MatchFunc(needsAuth)),
		edgeUnary,
	}
}

// StreamInterceptors returns, in order, authentication (health checks
// exempt) and the edge checks of SubmitStream: each Request the stream
// receives is checked against its tenant's routes and priority ceiling. A
// refused request gets a Rejection with PERMISSION_DENIED from this layer
// (so the stream's summaries do not count it) and the server never sees
// it; one above the ceiling in lower mode is lowered.
func (a *Authenticator) StreamInterceptors() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{
		selector.StreamServerInterceptor(auth.StreamServerInterceptor(a.AuthFunc), selector.MatchFunc(needsAuth)),
		edgeStream,
	}
}

// edgeUnary checks Submit's request against its tenant.
func edgeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if r, ok := req.(*batcherv1.SubmitRequest); ok {
		if t := TenantFrom(ctx); t != nil && !t.unrestricted() {
			if err := checkRequest(t, r.GetRequest()); err != nil {
				return nil, err
			}
		}
	}
	return handler(ctx, req)
}

func edgeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	t := TenantFrom(ss.Context())
	if t == nil || t.unrestricted() || info.FullMethod != batcherv1.BatcherService_SubmitStream_FullMethodName {
		return handler(srv, ss) // nothing to check: no wrapper, no lock per send
	}
	w := &edgeStreamWrapper{ServerStream: ss, t: t}
	err := handler(srv, w)
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	return err
}

// checkRequest enforces the tenant's routes and priority ceiling on r,
// lowering r's priority in place when the tenant's mode says so.
func checkRequest(t *Tenant, r *batcherv1.Request) error {
	if r == nil {
		return nil // the server names the missing field
	}
	if err := t.CheckRoute(r.GetModel()); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	p := fromProto(r.GetPriority())
	capped, err := t.CapPriority(p)
	if err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	if capped != p {
		r.Priority = toProto(capped)
	}
	return nil
}

// edgeStreamWrapper checks each received Request. Sends are serialized:
// the server's sender and this layer's rejections share the stream.
type edgeStreamWrapper struct {
	grpc.ServerStream
	t    *Tenant
	mu   sync.Mutex
	done bool // the handler returned: send nothing more
}

func (w *edgeStreamWrapper) SendMsg(m any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ServerStream.SendMsg(m)
}

func (w *edgeStreamWrapper) RecvMsg(m any) error {
	for {
		if err := w.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		msg, ok := m.(*batcherv1.SubmitStreamRequest)
		if !ok || msg.GetRequest() == nil {
			return nil
		}
		err := checkRequest(w.t, msg.GetRequest())
		if err == nil {
			return nil
		}
		st, _ := status.FromError(err)
		rej := &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{
			Rejection: &batcherv1.Rejection{Id: msg.GetRequest().GetId(), Error: st.Proto()},
		}}
		w.mu.Lock()
		if w.done {
			w.mu.Unlock()
			return errors.New("stream ended")
		}
		err = w.ServerStream.SendMsg(rej)
		w.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func fromProto(p batcherv1.Priority) batcher.Priority {
	switch p {
	case batcherv1.Priority_PRIORITY_URGENT:
		return batcher.PriorityUrgent
	case batcherv1.Priority_PRIORITY_HIGH:
		return batcher.PriorityHigh
	case batcherv1.Priority_PRIORITY_LOW:
		return batcher.PriorityLow
	case batcherv1.Priority_PRIORITY_DEFERRABLE:
		return batcher.PriorityDeferrable
	}
	return batcher.PriorityNormal
}

func toProto(p batcher.Priority) batcherv1.Priority {
	switch p {
	case batcher.PriorityUrgent:
		return batcherv1.Priority_PRIORITY_URGENT
	case batcher.PriorityHigh:
		return batcherv1.Priority_PRIORITY_HIGH
	case batcher.PriorityLow:
		return batcherv1.Priority_PRIORITY_LOW
	case batcher.PriorityDeferrable:
		return batcherv1.Priority_PRIORITY_DEFERRABLE
	}
	return batcherv1.Priority_PRIORITY_NORMAL
}

// AdminServiceOnly is AdminOnly for every method of the AdminService
// (WatchStats): batcherd's admin check on its gRPC listener.
func AdminServiceOnly() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	prefix := "/" + batcherv1.AdminService_ServiceDesc.ServiceName + "/"
	return AdminOnly(func(method string) bool { return strings.HasPrefix(method, prefix) })
}

// AdminOnly returns interceptors that answer PERMISSION_DENIED to a call of
// a method for which admin(fullMethod) is true when the caller's tenant
// lacks the admin right. Chain them after GRPCServerOptions' interceptors,
// for example for WatchStats:
//
//	admin := func(m string) bool { return m == batcherv1.BatcherService_WatchStats_FullMethodName }
//	u, s := security.AdminOnly(admin)
//	grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s)
func AdminOnly(admin func(fullMethod string) bool) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	deny := func(ctx context.Context, method string) error {
		if !admin(method) {
			return nil
		}
		if t := TenantFrom(ctx); t == nil || !t.Admin {
			return status.Error(codes.PermissionDenied, "the admin right is needed")
		}
		return nil
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := deny(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := deny(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return handler(srv, ss)
		}
}
