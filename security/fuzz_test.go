package security

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

func FuzzParseTenants(f *testing.F) {
	f.Add(string(tenantsYAML("token-a-0123456789abcdefghij", "token-b-0123456789abcdefghij")))
	f.Add("tenants:\n  - name: a\n    tokens: [sha256:zz]\n")
	f.Add("tenants:\n  - {name: a, spiffe_ids: ['spiffe://x/y'], weight: -1}\n")
	f.Add("tenants: [{name: a, quotas: {queue_share: .5}}]\n---\n")
	f.Add("&a [*a]")
	f.Add("tenants:\n  - {name: a, jwt_subjects: [s], quotas: {rpm: 10, tpm: 2000000000, in_flight: -1}}\n")
	f.Add("tenants:\n  - {name: a, jwt_subjects: [s], quotas: {queue_share: .nan, jobs: 3, items_per_job: 10}}\n")
	f.Fuzz(func(t *testing.T, data string) {
		ts, err := ParseTenants([]byte(data))
		if err != nil {
			return
		}
		for _, n := range ts.Names() {
			tn := ts.Tenant(n)
			q := tn.Quotas
			if !nameRE.MatchString(n) || tn.Weight < 1 || tn.Weight > MaxWeight {
				t.Fatalf("accepted a bad tenant %+v", tn)
			}
			for _, v := range []int{q.RPM, q.TPM, q.InFlight, q.Jobs, q.ItemsPerJob} {
				if v < 0 || v > MaxQuota {
					t.Fatalf("accepted bad quotas %+v", q)
				}
			}
			if !(q.QueueShare >= 0 && q.QueueShare <= 1) {
				t.Fatalf("accepted queue_share %v", q.QueueShare)
			}
		}
		// What the file accepts, the core accepts.
		if err := checkPolicies(ts.Policies()); err != nil {
			t.Fatalf("the core refuses accepted tenants: %v", err)
		}
	})
}

// FuzzAuthorization feeds any Authorization header value to the
// authenticator: it never panics, and only the configured token passes.
func FuzzAuthorization(f *testing.F) {
	const token = "the-one-token-0123456789abcdef"
	ts, err := ParseTenants([]byte("tenants:\n  - name: a\n    tokens: [" + HashToken(token) + "]\n"))
	if err != nil {
		f.Fatal(err)
	}
	a := &Authenticator{log: quiet}
	a.SetTenants(ts)
	for _, s := range []string{"Bearer " + token, "bearer  " + token, "Bearer", "Basic x", "Bearer a.b.c", "", " ", "Bearer " + strings.Repeat("a", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, authz string) {
		tn, err := a.authenticate(context.Background(), authz, nil)
		if err == nil {
			if got, _ := bearer(authz); got != token || tn.Name != "a" {
				t.Fatalf("%q authenticated as %v", authz, tn)
			}
		} else if !errors.Is(err, errUnauthenticated) {
			t.Fatalf("error %v leaks more than unauthenticated", err)
		}
	})
}

// FuzzJWT feeds any string to the JWT verifier: it never panics, and only
// a validly signed token passes.
func FuzzJWT(f *testing.F) {
	k := newSigner(f, "k1")
	dir := f.TempDir()
	writeFile(f, dir+"/jwks.json", jwks(f, k))
	v, err := newJWTVerifier(JWTConfig{JWKSFile: dir + "/jwks.json", Issuer: testIssuer, Audience: testAudience})
	if err != nil {
		f.Fatal(err)
	}
	good := k.token(f, "s", time.Hour)
	f.Add(good)
	f.Add(good[:len(good)-2])
	f.Add(k.token(f, "s", -time.Hour))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJzIn0.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, raw string) {
		sub, err := v.verify(context.Background(), raw)
		if err == nil && (raw != good || sub != "s") {
			t.Fatalf("%q verified as %q", raw, sub)
		}
	})
}

// FuzzJWKS feeds any document to the JWKS parser.
func FuzzJWKS(f *testing.F) {
	f.Add(string(jwks(f, newSigner(f, "k"))))
	f.Add(`{"keys":[]}`)
	f.Add(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, doc string) {
		_, _ = parseJWKS([]byte(doc))
	})
}

// checkPolicies runs the core's validation of tenant policies on a
// throwaway Batcher.
func checkPolicies(ps []batcher.TenantPolicy) error {
	b, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: batcher.BackendFunc(func(context.Context, *batcher.Batch, []batcher.Response) error { return nil })}),
		batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "be"}))
	if err != nil {
		return err
	}
	defer b.Shutdown(context.Background()) //nolint:errcheck // nothing was admitted
	return b.SetTenants(ps)
}
