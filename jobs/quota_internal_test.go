package jobs

import "testing"

// TestQuotaErrorReads: a job quota refusal names the tenant, the quota as
// the tenants file spells it and its limit, singular and plural.
func TestQuotaErrorReads(t *testing.T) {
	for _, c := range []struct {
		e    QuotaError
		want string
	}{
		{QuotaError{Tenant: "t", Quota: QuotaJobs, Limit: 1}, `tenant "t": quota jobs exceeded: limit 1 job not ended at once`},
		{QuotaError{Tenant: "t", Quota: QuotaJobs, Limit: 3}, `tenant "t": quota jobs exceeded: limit 3 jobs not ended at once`},
		{QuotaError{Tenant: "t", Quota: QuotaItemsPerJob, Limit: 1}, `tenant "t": quota items_per_job exceeded: the job has more than the limit of 1 item`},
		{QuotaError{Tenant: "t", Quota: QuotaItemsPerJob, Limit: 10}, `tenant "t": quota items_per_job exceeded: the job has more than the limit of 10 items`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.e, got, c.want)
		}
	}
}
