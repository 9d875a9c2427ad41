package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// TestTenantIsolation: a job is its tenant's; to another tenant every
// method answers ErrNotFound exactly as for an unknown id, and lists leave
// it out. An unscoped call sees every job.
func TestTenantIsolation(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	asA := jobs.WithTenant(ctx, jobs.Tenant{Name: "a"})
	asB := jobs.WithTenant(ctx, jobs.Tenant{Name: "b"})
	c, err := e.m.Begin(asA, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(asA, "x", chatItem("hello")); err != nil {
		t.Fatal(err)
	}
	j, err := c.Finish(asA)
	if err != nil {
		t.Fatal(err)
	}
	if j.Tenant != "a" {
		t.Fatalf("tenant %q", j.Tenant)
	}
	e.wait(t, j.ID)

	_, unknown := e.m.Get(asB, "job_00000000000000000000")
	for name, call := range map[string]func(context.Context) error{
		"Get":    func(ctx context.Context) error { _, err := e.m.Get(ctx, j.ID); return err },
		"Cancel": func(ctx context.Context) error { _, err := e.m.Cancel(ctx, j.ID); return err },
		"Results": func(ctx context.Context) error {
			_, err := e.m.Results(ctx, j.ID, -1, jobs.ItemPending, 10)
			return err
		},
		"Watch": func(ctx context.Context) error {
			return e.m.Watch(ctx, j.ID, 0, func(jobs.Progress) error { return nil })
		},
		"Delete": func(ctx context.Context) error { return e.m.Delete(ctx, j.ID) },
	} {
		err := call(asB)
		if !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("%s as b = %v, want ErrNotFound", name, err)
		}
		if len(err.Error()) != len(unknown.Error()) {
			t.Errorf("%s as b says %q; an unknown id says %q", name, err, unknown)
		}
	}
	if js, err := e.m.List(asB, jobs.ListQuery{Limit: 10}); err != nil || len(js) != 0 {
		t.Fatalf("b lists %v, %v", js, err)
	}
	if js, err := e.m.List(asA, jobs.ListQuery{Limit: 10}); err != nil || len(js) != 1 || js[0].ID != j.ID {
		t.Fatalf("a lists %v, %v", js, err)
	}
	if ts, err := e.m.Results(asA, j.ID, -1, jobs.ItemPending, 10); err != nil || len(ts) != 1 {
		t.Fatalf("a's results: %v, %v", ts, err)
	}
	if _, err := e.m.Get(ctx, j.ID); err != nil {
		t.Fatalf("unscoped Get: %v", err)
	}
}

// TestTenantQuotas: a tenant at its jobs quota is refused a new job, and a
// job past the tenant's items_per_job quota is refused; both name the
// quota.
func TestTenantQuotas(t *testing.T) {
	e := newEnv(t, nil)
	ctx := jobs.WithTenant(t.Context(), jobs.Tenant{Name: "q", MaxJobs: 1, MaxItems: 2})
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "gatedchat"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Add(ctx, "", chatItem("hi")); err != nil {
			t.Fatal(err)
		}
	}
	err = c.Add(ctx, "", chatItem("one too many"))
	if !errors.Is(err, jobs.ErrQuota) || !errors.Is(err, jobs.ErrTooManyItems) {
		t.Fatalf("a third item = %v, want ErrQuota and ErrTooManyItems", err)
	}
	if want := "items_per_job"; !strings.Contains(err.Error(), want) {
		t.Fatalf("%q does not name %s", err, want)
	}
	if qe := (*jobs.QuotaError)(nil); !errors.As(err, &qe) || qe.Quota != jobs.QuotaItemsPerJob || qe.Limit != 2 || qe.RetryAfter != 0 {
		t.Errorf("the items_per_job quota's error = %#v", qe)
	}
	if _, err := c.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if !errors.Is(err, jobs.ErrQuota) || !strings.Contains(err.Error(), "limit 1 job not ended at once") {
		t.Fatalf("a second job under a jobs quota of 1 = %v", err)
	}
	// Both refusals are typed: the tenant, the quota and its limit, and
	// the core's kind of quota error, which every door maps alike.
	var qe *jobs.QuotaError
	if !errors.As(err, &qe) || qe.Tenant != "q" || qe.Quota != jobs.QuotaJobs || qe.Limit != 1 || qe.RetryAfter != jobs.QuotaRetryAfter ||
		!errors.Is(err, batcher.ErrQuotaExceeded) || errors.Is(err, jobs.ErrTooManyItems) {
		t.Errorf("the jobs quota's error = %#v", qe)
	}
}

// TestJobItemsCarryTheirTenant: a job's items reach the core as its
// tenant's requests, so the tenant's quotas and fair share cover them; a
// quota the core refuses an item for holds the item back, it does not
// fail it.
func TestJobItemsCarryTheirTenant(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.core.SetTenants([]batcher.TenantPolicy{{Name: "t", Quotas: batcher.TenantQuotas{InFlight: 3}}}); err != nil {
		t.Fatal(err)
	}
	ctx := jobs.WithTenant(t.Context(), jobs.Tenant{Name: "t"})
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if err := c.Add(ctx, fmt.Sprint("c", i), chatItem(fmt.Sprint("item ", i))); err != nil {
			t.Fatal(err)
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := e.wait(t, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("job under an in_flight quota of 3: %s, %+v; want all %d succeeded", p.State, p.Counts, n)
	}
	var st *batcher.TenantStats
	for _, ts := range e.core.Tenants() {
		if ts.Name == "t" {
			st = &ts
		}
	}
	if st == nil || st.Admitted != n || st.Completed["ok"] != n {
		t.Fatalf("the core's view of tenant t: %+v; want %d admitted and ok", st, n)
	}
	if st.Rejected["in_flight"] == 0 {
		t.Fatal("no item was held back by the in_flight quota: the job ran more than 3 at once without the core refusing")
	}
}
