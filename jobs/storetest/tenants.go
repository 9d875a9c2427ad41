package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

// createAs creates an empty job of tenant under a quota of maxActive.
func createAs(ctx context.Context, s jobs.Store, tenant string, maxActive int) (string, error) {
	id := newID()
	return id, s.CreateJob(ctx, &jobs.Job{ID: id, Tenant: tenant, State: jobs.StateValidating, CreatedAt: time.Now()}, maxActive)
}

// testTenants: a job keeps its tenant; a tenant's list holds its jobs
// only, and a page token naming another tenant's job is refused as if it
// named none; the jobs quota counts only jobs not ended.
func testTenants(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	a, b := "a-"+newID(), "b-"+newID()
	var aIDs []string
	for range 3 {
		id, err := createAs(ctx, s, a, 0)
		if err != nil {
			t.Fatal(err)
		}
		aIDs = append(aIDs, id)
	}
	bID, err := createAs(ctx, s, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j := get(t, s, aIDs[0]); j.Tenant != a {
		t.Fatalf("tenant %q, want %q", j.Tenant, a)
	}
	page, err := s.ListJobs(ctx, a, jobs.ListQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range page {
		got = append(got, j.ID)
	}
	want := slices.Clone(aIDs)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("tenant a lists %v, want %v", got, want)
	}
	if page, err := s.ListJobs(ctx, a, jobs.ListQuery{After: aIDs[2], Limit: 1}); err != nil || len(page) != 1 || page[0].ID != aIDs[1] {
		t.Fatalf("second page = %v, %v", page, err)
	}
	if _, err := s.ListJobs(ctx, a, jobs.ListQuery{After: bID, Limit: 10}); !errors.Is(err, jobs.ErrInvalid) {
		t.Fatalf("a page token naming b's job = %v, want ErrInvalid", err)
	}
	all, err := s.ListJobs(ctx, "", jobs.ListQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(all, func(j *jobs.Job) bool { return j.ID == bID }) {
		t.Fatal("an unscoped list lacks b's job")
	}

	// Quota 3: a has 3 jobs not ended, so a fourth is refused, b's own
	// quota is untouched, and once one of a's ends a new one fits.
	if _, err := createAs(ctx, s, a, 3); !errors.Is(err, jobs.ErrQuota) {
		t.Fatalf("a fourth job under a quota of 3 = %v, want ErrQuota", err)
	}
	if _, err := createAs(ctx, s, b, 3); err != nil {
		t.Fatalf("b under its own quota: %v", err)
	}
	if err := s.Transition(ctx, aIDs[0], []jobs.State{jobs.StateValidating}, jobs.StateCancelled, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := createAs(ctx, s, a, 3); err != nil {
		t.Fatalf("after one of a's jobs ended: %v", err)
	}
}

// testTenantQuotaConcurrentSafe: creations racing for a tenant's last
// places never pass its quota.
func testTenantQuotaConcurrentSafe(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	tenant := "race-" + newID()
	const quota, tries = 3, 12
	var wg sync.WaitGroup
	errs := make(chan error, tries)
	for range tries {
		wg.Go(func() {
			_, err := createAs(ctx, s, tenant, quota)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, jobs.ErrQuota):
			t.Fatalf("CreateJob: %v", err)
		}
	}
	if ok != quota {
		t.Fatalf("%d jobs created under a quota of %d", ok, quota)
	}
}

// testListKind: a list by kind pages through one tenant's jobs of that
// kind alone, newest first, in the query: among many jobs of other kinds
// and tenants, each page holds up to its limit of them and no other; a
// page token naming a job of another kind or tenant is refused as if it
// named none.
func testListKind(t *testing.T, s jobs.Store) {
	ctx := t.Context()
	a, b := "a-"+newID(), "b-"+newID()
	create := func(tenant, kind string) string {
		t.Helper()
		id := newID()
		if err := s.CreateJob(ctx, &jobs.Job{ID: id, Tenant: tenant, State: jobs.StateValidating, CreatedAt: time.Now(),
			Spec: jobs.Spec{Kind: kind}}, 0); err != nil {
			t.Fatal(err)
		}
		return id
	}
	const plain, every = 600, 20 // a batch every 20 jobs: 30 batches among 600 others
	var batches []string
	var plainID string
	for i := range plain {
		plainID = create(a, "")
		if i%every == 0 {
			batches = append(batches, create(a, jobs.KindOpenAIBatch))
			create(b, jobs.KindOpenAIBatch)
		}
	}
	if j := get(t, s, batches[0]); j.Spec.Kind != jobs.KindOpenAIBatch {
		t.Fatalf("kind %q, want %q", j.Spec.Kind, jobs.KindOpenAIBatch)
	}
	if j := get(t, s, plainID); j.Spec.Kind != "" {
		t.Fatalf("a plain job's kind %q, want none", j.Spec.Kind)
	}
	const limit = 7
	var got []string
	after := ""
	for {
		page, err := s.ListJobs(ctx, a, jobs.ListQuery{Kind: jobs.KindOpenAIBatch, After: after, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("a page of %d jobs under a limit of %d", len(page), limit)
		}
		for _, j := range page {
			if j.Tenant != a || j.Spec.Kind != jobs.KindOpenAIBatch {
				t.Fatalf("listed %s of tenant %q, kind %q", j.ID, j.Tenant, j.Spec.Kind)
			}
			got = append(got, j.ID)
		}
		if len(page) < limit {
			break
		}
		after = page[len(page)-1].ID
	}
	want := slices.Clone(batches)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d batches %v, want %d newest first %v", len(got), got, len(want), want)
	}
	for _, after := range []string{plainID, "job_nope"} {
		if _, err := s.ListJobs(ctx, a, jobs.ListQuery{Kind: jobs.KindOpenAIBatch, After: after, Limit: limit}); !errors.Is(err, jobs.ErrInvalid) {
			t.Fatalf("a page token naming %s = %v, want ErrInvalid", after, err)
		}
	}
	// Unscoped, the kind still filters: b's batches are there, no plain job.
	all, err := s.ListJobs(ctx, "", jobs.ListQuery{Kind: jobs.KindOpenAIBatch, Limit: 2 * len(batches)})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2*len(batches) || slices.ContainsFunc(all, func(j *jobs.Job) bool { return j.Spec.Kind != jobs.KindOpenAIBatch }) {
		t.Fatalf("unscoped list of batches: %d jobs, want %d batches", len(all), 2*len(batches))
	}
}
