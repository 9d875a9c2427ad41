package security

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// errUnauthenticated is all a caller learns of a refused credential:
// whether the token was unknown, the JWT's signature bad or the certificate
// unmapped would help a guesser. The reason goes to the debug log.
var errUnauthenticated = errors.New("unauthenticated")

// Authenticator turns a call's credentials into a Tenant. It serves gRPC
// (Authenticator.AuthFunc, for go-grpc-middleware's auth interceptor) and
// net/http (HTTPMiddleware) with the same logic:
//
//  1. a bearer token in the Authorization header: a JWT (three dot-separated
//     parts) when JWTs are configured, mapped through the tenant claim to a
//     tenant's jwt_subjects; otherwise a token whose SHA-256 a tenant lists;
//  2. without one, a verified client certificate: its SPIFFE ID (URI SAN)
//     mapped through spiffe_ids, else its subject through cert_subjects;
//  3. without a tenants file, every caller is the anonymous tenant, which
//     may do anything (batcherd as it was before authentication).
//
// A credential that is present and bad is refused; the next source is not
// tried. Safe for concurrent use; the tenants may be replaced at any time.
type Authenticator struct {
	tenants atomic.Pointer[Tenants] // nil: anonymous
	jwt     *jwtVerifier            // nil: JWTs are not accepted
	log     *slog.Logger

	mu      sync.Mutex
	streams map[*streamGrant]struct{} // open streams, for Revalidate
}

// Tenants returns the tenants in force, or nil in anonymous mode.
func (a *Authenticator) Tenants() *Tenants { return a.tenants.Load() }

// SetTenants replaces the tenants; requests admitted before keep theirs.
func (a *Authenticator) SetTenants(ts *Tenants) { a.tenants.Store(ts) }

// authenticate applies the rules above. bearer is the Authorization header's
// value; state is the connection's TLS state, or nil.
func (a *Authenticator) authenticate(ctx context.Context, authz string, state *tls.ConnectionState) (*Tenant, error) {
	ts := a.tenants.Load()
	if ts == nil {
		return anonymous, nil
	}
	if authz != "" {
		token, ok := bearer(authz)
		if !ok {
			return a.refuse(ctx, "authorization header is not a bearer token")
		}
		if len(token) > MaxTokenBytes {
			return a.refuse(ctx, "bearer token too long")
		}
		if a.jwt != nil && looksLikeJWT(token) {
			sub, err := a.jwt.verify(ctx, token)
			if err != nil {
				return a.refuse(ctx, "jwt: "+err.Error())
			}
			if t := ts.byJWT[sub]; t != nil {
				return t, nil
			}
			return a.refuse(ctx, "jwt: no tenant lists the token's "+a.jwt.cfg.TenantClaim+" claim")
		}
		if len(token) < MinTokenBytes {
			return a.refuse(ctx, "bearer token too short")
		}
		if t := ts.byBearer(token); t != nil {
			return t, nil
		}
		return a.refuse(ctx, "unknown bearer token")
	}
	if state != nil && len(state.VerifiedChains) > 0 && len(state.PeerCertificates) > 0 {
		leaf := state.PeerCertificates[0]
		for _, u := range leaf.URIs {
			if u.Scheme != "spiffe" {
				continue
			}
			if t := ts.bySPIFFE[u.String()]; t != nil {
				return t, nil
			}
			return a.refuse(ctx, "client certificate's SPIFFE ID is not mapped to a tenant", "spiffe_id", u.String())
		}
		if t := ts.bySubject[leaf.Subject.String()]; t != nil {
			return t, nil
		}
		return a.refuse(ctx, "client certificate's subject is not mapped to a tenant", "subject", leaf.Subject.String())
	}
	return a.refuse(ctx, "no credentials")
}

// refuse logs why at debug level, never the credential, and returns the
// one error callers see.
func (a *Authenticator) refuse(ctx context.Context, reason string, attrs ...any) (*Tenant, error) {
	a.log.DebugContext(ctx, "security: authentication refused", append([]any{"reason", reason}, attrs...)...)
	return nil, errUnauthenticated
}

// bearer returns the token of an "Authorization: Bearer <token>" value.
func bearer(authz string) (string, bool) {
	scheme, token, ok := strings.Cut(authz, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
