package security

import (
	"context"
	"strings"

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

// UnaryInterceptors returns authentication (health checks exempt). What
// the tenant may ask is not checked here but by the door, on core types,
// after it translates the call (batcher.Access.Admit, from AccessFrom).
func (a *Authenticator) UnaryInterceptors() []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{
		selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(a.AuthFunc), selector.MatchFunc(needsAuth)),
	}
}

// StreamInterceptors returns authentication (health checks exempt), and
// the registration of each stream of a tenant for revocation (revoke.go);
// see UnaryInterceptors.
func (a *Authenticator) StreamInterceptors() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{
		selector.StreamServerInterceptor(auth.StreamServerInterceptor(a.AuthFunc), selector.MatchFunc(needsAuth)),
		a.streamInterceptor,
	}
}

// AdminServiceOnly is AdminOnly for every method of the named gRPC
// service (batcherd: batcher.v1.AdminService, with WatchStats): its admin
// check on its gRPC listener.
func AdminServiceOnly(service string) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	prefix := "/" + service + "/"
	return AdminOnly(func(method string) bool { return strings.HasPrefix(method, prefix) })
}

// AdminOnly returns interceptors that answer PERMISSION_DENIED to a call of
// a method for which admin(fullMethod) is true when the caller's tenant
// lacks the admin right. Chain them after GRPCServerOptions' interceptors,
// for example for WatchStats:
//
//	admin := func(m string) bool { return m == "/batcher.v1.AdminService/WatchStats" }
//	u, s := security.AdminOnly(admin)
//	grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s)
func AdminOnly(admin func(fullMethod string) bool) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	deny := func(ctx context.Context, method string) error {
		if !admin(method) {
			return nil
		}
		var addr string
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		if !TenantFrom(ctx).AdminFrom(addr) {
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
