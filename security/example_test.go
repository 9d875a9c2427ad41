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

// A handler reads the caller's tenant from the context and applies its
// route and priority rules.
func ExampleTenantFrom() {
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

	t := security.TenantFrom(ctx)
	fmt.Println(t.Name, t.CheckRoute("gpt-4o-mini") == nil, t.CheckRoute("o1") != nil)
	p, _ := t.CapPriority(batcher.PriorityUrgent)
	fmt.Println(p)
	// Output:
	// search true true
	// normal
}
