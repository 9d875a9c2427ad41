package jobs

import (
	"fmt"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// The jobs package's tenant quotas, as QuotaError.Quota and the tenants
// file spell them.
const (
	// QuotaJobs: jobs not ended at once.
	QuotaJobs = "jobs"
	// QuotaItemsPerJob: items in one job.
	QuotaItemsPerJob = "items_per_job"
)

// QuotaError says which of a tenant's job quotas refused a job. It is
// ErrQuota, and batcher.ErrQuotaExceeded as the core's quotas are, so that
// every door answers a tenant over a quota alike (RESOURCE_EXHAUSTED, 429);
// an items_per_job refusal is also ErrTooManyItems.
type QuotaError struct {
	Tenant string
	Quota  string // QuotaJobs or QuotaItemsPerJob
	Limit  int64  // the quota as configured
	// RetryAfter is when a retry may pass: QuotaRetryAfter for the jobs
	// quota, which frees as the tenant's jobs end; 0 for items_per_job,
	// which the same job would exceed again.
	RetryAfter time.Duration
}

// Error names the tenant, the quota as the tenants file spells it, and
// its limit, such as `tenant "team-a": quota jobs exceeded: limit 1 job
// not ended at once`.
func (e *QuotaError) Error() string {
	msg := fmt.Sprintf("tenant %q: quota %s exceeded: ", e.Tenant, e.Quota)
	if e.Quota == QuotaJobs {
		if e.Limit == 1 {
			return msg + "limit 1 job not ended at once"
		}
		return msg + fmt.Sprintf("limit %d jobs not ended at once", e.Limit)
	}
	if e.Limit == 1 {
		return msg + "the job has more than the limit of 1 item"
	}
	return msg + fmt.Sprintf("the job has more than the limit of %d items", e.Limit)
}

// Is reports whether target is one of the kinds e is.
func (e *QuotaError) Is(target error) bool {
	return target == ErrQuota || target == batcher.ErrQuotaExceeded || (e.Quota == QuotaItemsPerJob && target == ErrTooManyItems)
}

// quotaError returns the QuotaError of tenant's quota.
func quotaError(tenant, quota string, limit int64) error {
	e := &QuotaError{Tenant: tenant, Quota: quota, Limit: limit}
	if quota == QuotaJobs {
		e.RetryAfter = QuotaRetryAfter
	}
	return e
}
