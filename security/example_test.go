package security_test

import (
	"context"
	"fmt"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/security"
)

// A tenants file stores each bearer token as its SHA-256; the token itself
// goes to the caller only.
func ExampleHashToken() {
	fmt.Println(security.HashToken("correct-horse-battery-staple-0123456789"))
	// Output: sha256:7771a0cec1279f8ca878a66c694f3344b16bee8128c78b8ef5fd0656b35b02ee
}

// A door reads what the caller may ask from the context and admits each
// request with it, after translating its wire (batcher.Access.Admit).
func ExampleAccessFrom() {
	ts, err := security.ParseTenants([]byte(`
tenants:
  - name: search
    jwt_subjects: [search-svc]
    routes: [gpt-4o-mini]
    max_priority: normal
`))
	if err != nil {
		panic(err)
	}
	ctx := security.WithTenant(context.Background(), ts.Tenant("search"))

	a := security.AccessFrom(ctx)
	req := &batcher.Request{Route: "gpt-4o-mini", Priority: batcher.PriorityUrgent}
	fmt.Println(a.Admit(req), req.Priority, req.Tenant)
	fmt.Println(a.Admit(&batcher.Request{Route: "o1"}))
	// Output:
	// <nil> normal search
	// forbidden: tenant "search" may not use route "o1"
}
