package batcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func treq(tenant, id string) *Request {
	r := req(id, PriorityNormal)
	r.Tenant = tenant
	return r
}

// dispatchOrder holds the backend with one slot busy while heavy and then
// light queue their requests, then releases one batch at a time and
// returns the tenant of every request in dispatch order (the first,
// blocking batch left out).
func dispatchOrder(t *testing.T, tenants []TenantPolicy, heavy, light int) string {
	t.Helper()
	var order string
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 4, MinBatchSize: 1, Window: time.Hour})
		if err := b.SetTenants(tenants); err != nil {
			t.Fatal(err)
		}
		blocker := submit(t, b, treq("h", "blocker"))
		synctest.Wait()
		var calls []*Call
		for i := range heavy {
			calls = append(calls, submit(t, b, treq("h", fmt.Sprintf("h%03d", i))))
		}
		for i := range light {
			calls = append(calls, submit(t, b, treq("l", fmt.Sprintf("l%03d", i))))
		}
		for !isDone(blocker) || !allDone(calls) {
			be.hold <- struct{}{}
			synctest.Wait()
		}
		var sb strings.Builder
		for _, ids := range be.batchIDs()[1:] {
			for _, id := range ids {
				sb.WriteByte(id[0])
			}
		}
		order = sb.String()
	})
	return order
}

func allDone(cs []*Call) bool {
	for _, c := range cs {
		if !isDone(c) {
			return false
		}
	}
	return true
}

func TestFairQueuingEqualWeights(t *testing.T) {
	got := dispatchOrder(t, []TenantPolicy{{Name: "h"}, {Name: "l"}}, 20, 6)
	// Light's six go out one for one with heavy's, although heavy queued
	// twenty first.
	if want := "hlhlhlhlhlhl" + strings.Repeat("h", 14); got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

func TestFairQueuingWeighted(t *testing.T) {
	got := dispatchOrder(t, []TenantPolicy{{Name: "h", Weight: 1}, {Name: "l", Weight: 3}}, 20, 9)
	// Weight 3 against 1: three of light's for each of heavy's, so all nine
	// of light's are among the first twelve.
	if n := strings.Count(got[:12], "l"); n != 9 {
		t.Fatalf("dispatch order %s: %d of light's in the first 12, want 9", got, n)
	}
}

func TestFairQueuingOffIsFIFO(t *testing.T) {
	// Without SetTenants the tenant names are ignored: admission order.
	got := dispatchOrder(t, nil, 20, 6)
	if want := strings.Repeat("h", 20) + "llllll"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

func TestFairQueuingUnknownTenantsShareOneFlow(t *testing.T) {
	// "h" and "l" are not configured: both are OtherTenant, one flow.
	got := dispatchOrder(t, []TenantPolicy{{Name: "x"}}, 8, 2)
	if want := "hhhhhhhhll"; got != want {
		t.Fatalf("dispatch order %s, want %s", got, want)
	}
}

func TestFairQueuingPriorityFirst(t *testing.T) {
	// Fair queuing is inside a priority: URGENT work of the heavy tenant
	// still goes before NORMAL work of the light one.
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 2, MinBatchSize: 1, Window: time.Hour})
		if err := b.SetTenants([]TenantPolicy{{Name: "h"}, {Name: "l", Weight: 100}}); err != nil {
			t.Fatal(err)
		}
		blocker := submit(t, b, treq("h", "blocker"))
		synctest.Wait()
		light := []*Call{submit(t, b, treq("l", "l0")), submit(t, b, treq("l", "l1"))}
		u := treq("h", "u0")
		u.Priority = PriorityUrgent
		urgent := submit(t, b, u)
		for !isDone(blocker) || !isDone(urgent) || !allDone(light) {
			be.hold <- struct{}{}
			synctest.Wait()
		}
		if got := be.batchIDs()[1]; got[0] != "u0" {
			t.Fatalf("second batch %v, want u0 first", got)
		}
	})
}

func TestQuotaInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1})
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{InFlight: 2}}, {Name: "b"}}); err != nil {
			t.Fatal(err)
		}
		c1, c2 := submit(t, b, treq("a", "1")), submit(t, b, treq("a", "2"))
		_, err := b.Submit(context.Background(), treq("a", "3"))
		var qe *QuotaError
		if !errors.As(err, &qe) || !errors.Is(err, ErrQuotaExceeded) || qe.Quota != QuotaInFlight || qe.RetryAfter != QuotaRetryDelay {
			t.Fatalf("third: %v, want an in_flight QuotaError", err)
		}
		if want := `tenant "a": quota in_flight exceeded: limit 2 requests in flight`; err.Error() != want {
			t.Fatalf("message %q, want %q", err, want)
		}
		other := submit(t, b, treq("b", "b1")) // another tenant is not held back
		close(be.hold)
		synctest.Wait()
		wantOK(t, c1)
		wantOK(t, c2)
		wantOK(t, other)
		c4 := submit(t, b, treq("a", "4")) // freed as its requests ended
		synctest.Wait()
		wantOK(t, c4)
		st := tenantStats(b, "a")
		if st.Rejected[QuotaInFlight] != 1 || st.Admitted != 3 || st.Pending != 0 || st.Completed["ok"] != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestQuotaQueueShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1}, WithQueueCapacity(10))
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{QueueShare: 0.25}}}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // a quarter of 10, rounded down
			submit(t, b, treq("a", fmt.Sprint(i)))
		}
		_, err := b.Submit(context.Background(), treq("a", "x"))
		if want := `tenant "a": quota queue_share exceeded: limit 2 queued requests`; err == nil || err.Error() != want {
			t.Fatalf("got %v, want %s", err, want)
		}
		close(be.hold)
	})
}

func TestQuotaRPM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 1})
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{RPM: 2}}}); err != nil {
			t.Fatal(err)
		}
		submit(t, b, treq("a", "1"))
		submit(t, b, treq("a", "2"))
		_, err := b.Submit(context.Background(), treq("a", "3"))
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Quota != QuotaRPM || err.Error() != `tenant "a": quota rpm exceeded: limit 2 requests a minute` {
			t.Fatalf("third: %v", err)
		}
		if qe.RetryAfter <= 0 || qe.RetryAfter > 30*time.Second {
			t.Fatalf("RetryAfter %v, want (0, 30s]", qe.RetryAfter)
		}
		time.Sleep(qe.RetryAfter) // the fake clock: the bucket refills
		submit(t, b, treq("a", "4"))
	})
}

func TestQuotaTPM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Held: nothing ends, so nothing is given back.
		be := &fakeBackend{hold: make(chan struct{})}
		defer close(be.hold)
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1})
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{TPM: 100}}}); err != nil {
			t.Fatal(err)
		}
		r := func(id string, maxTokens int32) *Request {
			x := treq("a", id)
			x.Params.MaxTokens = maxTokens
			return x
		}
		submit(t, b, r("1", 40)) // about 43 tokens each
		submit(t, b, r("2", 40))
		_, err := b.Submit(context.Background(), r("3", 40))
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Quota != QuotaTPM || qe.RetryAfter <= 0 || err.Error() != `tenant "a": quota tpm exceeded: limit 100 tokens a minute` {
			t.Fatalf("third: %v", err)
		}
		// Larger than the whole quota: no retry can pass, and it says so.
		_, err = b.Submit(context.Background(), r("4", 1000))
		if !errors.As(err, &qe) || qe.RetryAfter != 0 || !strings.Contains(err.Error(), "more than the whole quota") {
			t.Fatalf("huge: %v", err)
		}
	})
}

// TestQuotaTPMRefund: a request whose reply reports fewer tokens than its
// admission reserved gives the rest back to its tenant's TPM quota, so the
// quota counts what was used, not the estimate.
func TestQuotaTPMRefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 1}) // 2 tokens a reply
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{TPM: 100}}}); err != nil {
			t.Fatal(err)
		}
		r := func(id string) *Request {
			x := treq("a", id)
			x.Params.MaxTokens = 40 // about 43 tokens reserved each
			return x
		}
		for i := range 6 { // 6 × 43 reserved, 6 × 2 used: within 100
			c := submit(t, b, r(fmt.Sprint(i)))
			<-c.Done()
			if err := c.Result().Err; err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		// Reserved and never used: nothing to give back, so the quota binds.
		be := &fakeBackend{hold: make(chan struct{})}
		defer close(be.hold)
		b2 := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1})
		if err := b2.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{TPM: 100}}}); err != nil {
			t.Fatal(err)
		}
		submit(t, b2, r("x"))
		submit(t, b2, r("y"))
		if _, err := b2.Submit(context.Background(), r("z")); !errors.Is(err, ErrQuotaExceeded) {
			t.Fatalf("a third request while two hold their tokens: %v, want ErrQuotaExceeded", err)
		}
	})
}

// TestQuotaTPMChargesOveruse: a request whose reply reports more tokens
// than its admission reserved (a prompt estimated low) is charged the
// rest on its tenant's TPM quota, so the quota counts what was used.
func TestQuotaTPMChargesOveruse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, reporting(Usage{PromptTokens: 120, CompletionTokens: 30}), 1, BatchConfig{MaxBatchSize: 1})
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{TPM: 100}}}); err != nil {
			t.Fatal(err)
		}
		r := func(id string) *Request {
			x := treq("a", id)
			x.Params.MaxTokens = 40 // about 43 tokens reserved
			return x
		}
		c := submit(t, b, r("long"))
		<-c.Done()
		if err := c.Result().Err; err != nil {
			t.Fatal(err)
		}
		// 150 used of a quota of 100: the next request waits for the debt.
		_, err := b.Submit(context.Background(), r("next"))
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Quota != QuotaTPM || qe.RetryAfter <= 0 {
			t.Fatalf("a request after one that used 150 tokens of a quota of 100: %v, want a tpm QuotaError with a RetryAfter", err)
		}
	})
}

func TestQuotaGivenBackWhenQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1}, WithQueueCapacity(2))
		if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{RPM: 3}}, {Name: "b"}}); err != nil {
			t.Fatal(err)
		}
		submit(t, b, treq("b", "b1"))
		c := submit(t, b, treq("b", "b2"))
		if _, err := b.Submit(context.Background(), treq("a", "a1")); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("got %v, want ErrQueueFull", err)
		}
		if st := tenantStats(b, "a"); st.Pending != 0 {
			t.Fatalf("pending %d after a refusal", st.Pending)
		}
		c.Cancel()
		close(be.hold)
		synctest.Wait()
		// The refused request spent none of a's three.
		for i := range 3 {
			submit(t, b, treq("a", fmt.Sprint(i)))
			synctest.Wait() // done, out of the small queue
		}
	})
}

func TestSetTenantsKeepsBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 1})
		set := func(rpm int) {
			t.Helper()
			if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{RPM: rpm}}}); err != nil {
				t.Fatal(err)
			}
		}
		set(1)
		submit(t, b, treq("a", "1"))
		set(1) // a reload: what a spent stays spent
		if _, err := b.Submit(context.Background(), treq("a", "2")); !errors.Is(err, ErrQuotaExceeded) {
			t.Fatalf("after reload: %v", err)
		}
		set(0) // the quota removed
		submit(t, b, treq("a", "3"))
		if err := b.SetTenants(nil); err != nil {
			t.Fatal(err)
		}
		if b.Tenants() != nil {
			t.Fatal("tenants still on after SetTenants(nil)")
		}
	})
}

func TestSetTenantsRefusesBadPolicies(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{})
	for _, tc := range []struct {
		p    []TenantPolicy
		want string
	}{
		{[]TenantPolicy{{}}, "tenants[0].name: must be set"},
		{[]TenantPolicy{{Name: OtherTenant}}, `tenants[0].name: "_other" is reserved`},
		{[]TenantPolicy{{Name: "a"}, {Name: "a"}}, `tenants[1].name: "a" names two tenants`},
		{[]TenantPolicy{{Name: "a", Weight: 1001}}, "tenants[0].weight: must be 1 to 1000, got 1001"},
		{[]TenantPolicy{{Name: "a", Quotas: TenantQuotas{TPM: -1}}}, "tenants[0].quotas.tpm: must not be negative, got -1"},
		{[]TenantPolicy{{Name: "a", Quotas: TenantQuotas{QueueShare: 1.5}}}, "tenants[0].quotas.queue_share: must be 0 to 1, got 1.5"},
	} {
		if err := b.SetTenants(tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetTenants(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
	if b.Tenants() != nil {
		t.Fatal("a refused set was applied")
	}
}

func tenantStats(b *Batcher, name string) TenantStats {
	for _, st := range b.Tenants() {
		if st.Name == name {
			return st
		}
	}
	return TenantStats{}
}

func TestMetricsTenantLabelBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	be := &fakeBackend{}
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1}, WithMeterProvider(mp))
	if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{RPM: 1}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tn := range []string{"a", "x1", "x2"} { // x1 and x2 are not configured
		if _, err := b.Do(ctx, treq(tn, tn)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Submit(ctx, treq("a", "over")); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("over quota: %v", err)
	}
	ms := collect(t, reader)
	admitted := points(t, ms["batcher.tenant.requests.admitted"])
	if admitted["batcher.tenant=a"] != 1 || admitted["batcher.tenant=_other"] != 2 || len(admitted) != 2 {
		t.Fatalf("admitted %v", admitted)
	}
	if got := points(t, ms["batcher.tenant.requests.completed"])["batcher.outcome=ok,batcher.tenant=_other"]; got != 2 {
		t.Fatalf("completed for _other: %v", got)
	}
	if got := points(t, ms["batcher.tenant.quota.rejected"])["batcher.quota=rpm,batcher.tenant=a"]; got != 1 {
		t.Fatalf("rejected rpm for a: %v", got)
	}
	if got := points(t, ms["batcher.tenant.requests.pending"])["batcher.tenant=a"]; got != 0 {
		t.Fatalf("pending for a: %v", got)
	}
}

// TestQuotaErrorReads: a quota refusal names the tenant, the quota as the
// tenants file spells it and its limit in words, singular and plural.
func TestQuotaErrorReads(t *testing.T) {
	for _, c := range []struct {
		e    QuotaError
		want string
	}{
		{QuotaError{Tenant: "a", Quota: QuotaRPM, Limit: 1}, `tenant "a": quota rpm exceeded: limit 1 request a minute`},
		{QuotaError{Tenant: "a", Quota: QuotaRPM, Limit: 60}, `tenant "a": quota rpm exceeded: limit 60 requests a minute`},
		{QuotaError{Tenant: "a", Quota: QuotaTPM, Limit: 1}, `tenant "a": quota tpm exceeded: limit 1 token a minute`},
		{QuotaError{Tenant: "a", Quota: QuotaTPM, Limit: 100, Need: 300}, `tenant "a": quota tpm exceeded: limit 100 tokens a minute; the request's estimated 300 tokens are more than the whole quota`},
		{QuotaError{Tenant: "a", Quota: QuotaInFlight, Limit: 1}, `tenant "a": quota in_flight exceeded: limit 1 request in flight`},
		{QuotaError{Tenant: "a", Quota: QuotaInFlight, Limit: 8}, `tenant "a": quota in_flight exceeded: limit 8 requests in flight`},
		{QuotaError{Tenant: "a", Quota: QuotaQueueShare, Limit: 1}, `tenant "a": quota queue_share exceeded: limit 1 queued request`},
		{QuotaError{Tenant: "a", Quota: QuotaQueueShare, Limit: 5}, `tenant "a": quota queue_share exceeded: limit 5 queued requests`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.e, got, c.want)
		}
	}
}
