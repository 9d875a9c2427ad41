package batcher

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Tenants: weights for fair queuing and quotas.
//
// A request names its tenant in Request.Tenant. Until SetTenants is called
// the core ignores the name: no quotas, one flow per priority, exactly the
// path without tenants. Once tenants are set, a request whose Tenant names
// none of them is served as the one tenant OtherTenant (weight 1, no
// quotas), so that the per-tenant state and the metrics' tenant label stay
// bounded by the configuration; a request with an empty Tenant (work the
// process makes itself) has no tenant.

// OtherTenant is the tenant label of requests whose tenant is not
// configured. It cannot be a configured tenant's name.
const OtherTenant = "_other"

// MaxTenantWeight bounds TenantPolicy.Weight.
const MaxTenantWeight = 1000

// QuotaRetryDelay is the RetryAfter of a QuotaError for the in_flight and
// queue_share quotas, which free as the tenant's requests end.
const QuotaRetryDelay = time.Second

// ErrQuotaExceeded: the request's tenant is over one of its quotas. The
// error is a *QuotaError naming the tenant and the quota.
var ErrQuotaExceeded = errors.New("batcher: tenant quota exceeded")

// The quota names, as QuotaError.Quota and the tenants file spell them.
const (
	QuotaRPM        = "rpm"
	QuotaTPM        = "tpm"
	QuotaQueueShare = "queue_share"
	QuotaInFlight   = "in_flight"
)

var quotaNames = [...]string{QuotaRPM, QuotaTPM, QuotaQueueShare, QuotaInFlight}

const (
	quotaRPM = iota
	quotaTPM
	quotaQueueShare
	quotaInFlight
	numQuotas
)

// QuotaError says which quota of which tenant refused a request. It wraps
// ErrQuotaExceeded.
type QuotaError struct {
	Tenant string
	Quota  string // QuotaRPM, QuotaTPM, QuotaQueueShare or QuotaInFlight
	// Limit is the quota as configured: requests or tokens per minute,
	// requests for in_flight and queue_share (the share's count of the
	// queue capacity).
	Limit int64
	// RetryAfter is when a retry may pass; 0 when no retry can (a request
	// larger than its tenant's whole TPM).
	RetryAfter time.Duration
	// Need is the request's estimated tokens when a TPM quota can never
	// admit it; 0 otherwise.
	Need int
}

// Error names the tenant, the quota as the tenants file spells it, and
// its limit in words, such as `tenant "team-a": quota rpm exceeded: limit
// 1 request a minute`.
func (e *QuotaError) Error() string {
	msg := fmt.Sprintf("tenant %q: quota %s exceeded: limit %s", e.Tenant, e.Quota, quotaLimitText(e.Quota, e.Limit))
	if e.Need > 0 {
		msg += fmt.Sprintf("; the request's estimated %s more than the whole quota", plural(int64(e.Need), "token is", "tokens are"))
	}
	return msg
}

// quotaLimitText is a quota's limit n in words.
func quotaLimitText(quota string, n int64) string {
	switch quota {
	case QuotaRPM:
		return plural(n, "request", "requests") + " a minute"
	case QuotaTPM:
		return plural(n, "token", "tokens") + " a minute"
	case QuotaQueueShare:
		return plural(n, "queued request", "queued requests")
	case QuotaInFlight:
		return plural(n, "request", "requests") + " in flight"
	}
	return fmt.Sprint(n)
}

// plural is n followed by one when n is 1, by many otherwise.
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Unwrap makes errors.Is(err, ErrQuotaExceeded) hold.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// TenantQuotas are a tenant's limits in the core; 0 is none.
type TenantQuotas struct {
	// RPM and TPM: requests and estimated tokens (prompt plus max_tokens)
	// admitted per minute. Each is a token bucket that holds one minute's
	// allowance and refills continuously. A reply that reports using fewer
	// tokens than its request's estimate gives the rest back to TPM.
	RPM int
	TPM int
	// QueueShare: the share (0 to 1) of the queue capacity that the
	// tenant's requests without a result may hold.
	QueueShare float64
	// InFlight: how many of the tenant's requests may be without a result
	// at once (queued, in flight upstream or waiting to retry).
	InFlight int
}

// TenantPolicy is one tenant as the core sees it.
type TenantPolicy struct {
	// Name is the tenant's name, as requests give it in Request.Tenant.
	Name string
	// Weight is the tenant's share in weighted fair queuing against the
	// other tenants queued at the same priority in the same lane. 1 to
	// MaxTenantWeight; 0 means 1.
	Weight int
	Quotas TenantQuotas
}

// tenantLimits is one tenant's resolved policy. Immutable; SetTenants
// swaps it whole. The limiters are shared between the versions of one
// tenant, so that a reload keeps what the buckets hold.
type tenantLimits struct {
	weight   float64
	rpm, tpm *rate.Limiter // nil: no quota
	rpmN     int64
	tpmN     int64
	queueMax int64 // 0: none
	share    float64
	inFlight int64 // 0: none
}

// tenantState is one tenant's live state in the core. Requests hold a
// pointer to it from admission to their end; SetTenants keeps a tenant's
// state across reloads and only swaps its limits.
type tenantState struct {
	name string
	lim  atomic.Pointer[tenantLimits]

	pending   atomic.Int64 // admitted requests without a result
	tpmCredit atomic.Int64 // TPM tokens given back (refundTPM), taken first
	rpmCredit atomic.Int64 // RPM requests given back (refundRPM), taken first
	admitted  atomic.Int64
	completed [numOutcomes]atomic.Int64
	rejected  [numQuotas]atomic.Int64
}

// tenantTable is the configured tenants. Immutable; SetTenants swaps it.
type tenantTable struct {
	byName map[string]*tenantState
	list   []*tenantState // configuration order, then OtherTenant
	other  *tenantState
}

// SetTenants sets the tenants whose requests the core weighs and limits,
// replacing the previous set whole: a tenant that stays keeps its buckets
// and counts, and its requests already admitted finish as they are. A bad
// policy fails the whole set with an error naming the field, and the old
// set stays. A nil or empty set turns tenants off: Request.Tenant is
// ignored again.
func (b *Batcher) SetTenants(ps []TenantPolicy) error {
	var errs []error
	seen := make(map[string]bool, len(ps))
	for i, p := range ps {
		path := fmt.Sprintf("tenants[%d]", i)
		switch {
		case p.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: must be set", path))
		case p.Name == OtherTenant:
			errs = append(errs, fmt.Errorf("%s.name: %q is reserved", path, p.Name))
		case seen[p.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q names two tenants", path, p.Name))
		}
		seen[p.Name] = true
		if p.Weight < 0 || p.Weight > MaxTenantWeight {
			errs = append(errs, fmt.Errorf("%s.weight: must be 1 to %d, got %d", path, MaxTenantWeight, p.Weight))
		}
		q := p.Quotas
		for _, v := range []struct {
			name string
			n    int
		}{{QuotaRPM, q.RPM}, {QuotaTPM, q.TPM}, {QuotaInFlight, q.InFlight}} {
			if v.n < 0 {
				errs = append(errs, fmt.Errorf("%s.quotas.%s: must not be negative, got %d", path, v.name, v.n))
			}
		}
		if !(q.QueueShare >= 0 && q.QueueShare <= 1) { // NaN too
			errs = append(errs, fmt.Errorf("%s.quotas.queue_share: must be 0 to 1, got %v", path, q.QueueShare))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b.tenantsMu.Lock()
	defer b.tenantsMu.Unlock()
	if len(ps) == 0 {
		b.tenants.Store(nil)
		return nil
	}
	old := b.tenants.Load()
	t := &tenantTable{byName: make(map[string]*tenantState, len(ps))}
	for _, p := range ps {
		var ts *tenantState
		if old != nil {
			ts = old.byName[p.Name]
		}
		if ts == nil {
			ts = &tenantState{name: p.Name}
		}
		ts.lim.Store(resolveLimits(p, ts.lim.Load(), b.cfg.queueCapacity))
		t.byName[p.Name] = ts
		t.list = append(t.list, ts)
	}
	t.other = b.otherTenant
	t.list = append(t.list, t.other)
	b.tenants.Store(t)
	return nil
}

// resolveLimits turns p into limits, reusing prev's buckets.
func resolveLimits(p TenantPolicy, prev *tenantLimits, capacity int) *tenantLimits {
	l := &tenantLimits{weight: float64(max(p.Weight, 1))}
	q := p.Quotas
	bucket := func(perMin int, old *rate.Limiter) *rate.Limiter {
		if perMin == 0 {
			return nil
		}
		r := rate.Limit(float64(perMin) / 60)
		if old == nil {
			return rate.NewLimiter(r, perMin) // starts full: a minute's allowance
		}
		now := time.Now()
		old.SetLimitAt(now, r)
		old.SetBurstAt(now, perMin)
		return old
	}
	var oldRPM, oldTPM *rate.Limiter
	if prev != nil {
		oldRPM, oldTPM = prev.rpm, prev.tpm
	}
	l.rpm, l.rpmN = bucket(q.RPM, oldRPM), int64(q.RPM)
	l.tpm, l.tpmN = bucket(q.TPM, oldTPM), int64(q.TPM)
	if q.QueueShare > 0 {
		l.share = q.QueueShare
		l.queueMax = max(int64(math.Floor(q.QueueShare*float64(capacity))), 1)
	}
	l.inFlight = int64(q.InFlight)
	return l
}

// tenantOf returns the state of req's tenant, or nil when tenants are off
// or the request names none.
func (b *Batcher) tenantOf(req *Request) *tenantState {
	t := b.tenants.Load()
	if t == nil || req.Tenant == "" {
		return nil
	}
	if ts := t.byName[req.Tenant]; ts != nil {
		return ts
	}
	return t.other
}

// tenantHold is what one admission took from its tenant's quotas, to give
// back when the admission fails further on.
type tenantHold struct {
	ts        *tenantState
	rpm, tpm  *rate.Reservation
	credit    int64 // tokens taken from the tenant's TPM credit
	rpmCredit bool  // the request was taken from the tenant's RPM credit
}

// admit takes one request of tokens estimated tokens from ts's quotas at
// now, or fails with a *QuotaError. The counting quotas go first: they
// cost nothing to give back.
func (ts *tenantState) admit(now time.Time, tokens int) (tenantHold, error) {
	lim := ts.lim.Load()
	h := tenantHold{ts: ts}
	n := ts.pending.Add(1)
	refuse := func(q int, limit int64, after time.Duration, need int) error {
		h.undo(now)
		ts.rejected[q].Add(1)
		return &QuotaError{Tenant: ts.name, Quota: quotaNames[q], Limit: limit, RetryAfter: after, Need: need}
	}
	if lim.inFlight > 0 && n > lim.inFlight {
		return tenantHold{}, refuse(quotaInFlight, lim.inFlight, QuotaRetryDelay, 0)
	}
	if lim.queueMax > 0 && n > lim.queueMax {
		return tenantHold{}, refuse(quotaQueueShare, lim.queueMax, QuotaRetryDelay, 0)
	}
	if lim.rpm != nil {
		if h.rpmCredit = takeCredit(&ts.rpmCredit, 1) == 1; !h.rpmCredit {
			h.rpm = lim.rpm.ReserveN(now, 1)
			if d := h.rpm.DelayFrom(now); !h.rpm.OK() || d > 0 {
				return tenantHold{}, refuse(quotaRPM, lim.rpmN, d, 0)
			}
		}
	}
	if lim.tpm != nil {
		if tokens > lim.tpm.Burst() {
			return tenantHold{}, refuse(quotaTPM, lim.tpmN, 0, tokens)
		}
		h.credit = takeCredit(&ts.tpmCredit, int64(tokens))
		if rest := tokens - int(h.credit); rest > 0 {
			h.tpm = lim.tpm.ReserveN(now, rest)
			if d := h.tpm.DelayFrom(now); d > 0 {
				return tenantHold{}, refuse(quotaTPM, lim.tpmN, d, 0)
			}
		}
	}
	return h, nil
}

// takeCredit takes up to n from credit (a tenant's TPM or RPM credit) and
// returns how many it took.
func takeCredit(credit *atomic.Int64, n int64) int64 {
	for {
		c := credit.Load()
		take := min(c, n)
		if take <= 0 || credit.CompareAndSwap(c, c-take) {
			return max(take, 0)
		}
	}
}

// refundTPM gives back n tokens a request reserved at admission and did
// not use (its reply reported fewer). rate.Limiter takes no partial
// refund, so they go to a credit the next admissions draw on first; what
// the bucket holds plus the credit stays within the bucket's size (one
// minute's allowance).
func (ts *tenantState) refundTPM(n int64) {
	refund(&ts.tpmCredit, ts.lim.Load().tpm, n)
}

// refundRPM gives back n requests to the RPM quota, as refundTPM does
// tokens.
func (ts *tenantState) refundRPM(n int64) {
	refund(&ts.rpmCredit, ts.lim.Load().rpm, n)
}

// refund adds up to n to credit, as far as lim's bucket has room.
func refund(credit *atomic.Int64, lim *rate.Limiter, n int64) {
	if lim == nil || n <= 0 {
		return
	}
	for {
		c := credit.Load()
		room := int64(float64(lim.Burst())-lim.Tokens()) - c
		add := min(n, room)
		if add <= 0 || credit.CompareAndSwap(c, c+add) {
			return
		}
	}
}

// undo gives back what admit took.
func (h *tenantHold) undo(now time.Time) {
	if h.ts == nil {
		return
	}
	h.ts.pending.Add(-1)
	h.spare(now)
}

// spare gives back what admit took of the tenant's RPM and TPM at now,
// the instant of the admission, and leaves the request counted pending:
// it is answered without going upstream (a cache hit), and ends as any
// other.
func (h *tenantHold) spare(now time.Time) {
	if h.ts == nil {
		return
	}
	if h.rpm != nil {
		h.rpm.CancelAt(now)
	}
	if h.tpm != nil {
		h.tpm.CancelAt(now)
	}
	if h.credit > 0 {
		h.ts.tpmCredit.Add(h.credit)
	}
	if h.rpmCredit {
		h.ts.rpmCredit.Add(1)
	}
	*h = tenantHold{}
}

// spareLate is spare after the instant of the admission, for a request of
// tokens estimated tokens: a reservation cancelled late gives nothing back
// (rate.Reservation.CancelAt), so what the hold took goes to the tenant's
// credits instead, within the buckets' room.
func (h *tenantHold) spareLate(tokens int) {
	if h.ts == nil {
		return
	}
	if h.rpm != nil || h.rpmCredit {
		h.ts.refundRPM(1)
	}
	if h.tpm != nil || h.credit > 0 {
		h.ts.refundTPM(int64(tokens))
	}
	*h = tenantHold{}
}

// ended books the end at now of one of ts's requests with err. reserved
// is what its admission took of the TPM quota (0: nothing to settle, as
// for an answer from the cache); a reply that reports using fewer tokens
// gives the rest back, one that used more is charged the rest.
func (ts *tenantState) ended(now time.Time, err error, reserved int, u Usage) {
	ts.pending.Add(-1)
	ts.completed[outcomeOf(err)].Add(1)
	used := int64(u.Total())
	switch {
	case used <= 0 || reserved <= 0:
	case used < int64(reserved):
		ts.refundTPM(int64(reserved) - used)
	case used > int64(reserved):
		ts.chargeTPM(now, used-int64(reserved))
	}
}

// chargeTPM takes n tokens a request used beyond what its admission
// reserved (a prompt estimated low) from ts's TPM quota: credit first,
// then the bucket, into debt, so that the next admissions wait for them.
func (ts *tenantState) chargeTPM(now time.Time, n int64) {
	lim := ts.lim.Load().tpm
	if lim == nil {
		return
	}
	n -= takeCredit(&ts.tpmCredit, n)
	for burst := int64(lim.Burst()); n > 0; n -= burst {
		lim.ReserveN(now, int(min(n, burst)))
	}
}

// weight returns the tenant's fair-queuing weight; a nil tenant weighs 1.
func (ts *tenantState) weight() float64 {
	if ts == nil {
		return 1
	}
	return ts.lim.Load().weight
}

// TenantStats is a snapshot of one tenant's counts.
type TenantStats struct {
	Name     string
	Pending  int64 // admitted requests without a result
	Admitted int64
	// Completed counts ended requests by outcome ("ok", or why not).
	Completed map[string]int64
	// Rejected counts refusals by quota name.
	Rejected map[string]int64
}

// Tenants returns a snapshot of every configured tenant and of
// OtherTenant, in configuration order; nil while tenants are off.
func (b *Batcher) Tenants() []TenantStats {
	t := b.tenants.Load()
	if t == nil {
		return nil
	}
	out := make([]TenantStats, 0, len(t.list))
	for _, ts := range t.list {
		st := TenantStats{Name: ts.name, Pending: ts.pending.Load(), Admitted: ts.admitted.Load(),
			Completed: map[string]int64{}, Rejected: map[string]int64{}}
		for o := range ts.completed {
			if n := ts.completed[o].Load(); n > 0 {
				st.Completed[outcomeNames[o]] = n
			}
		}
		for q := range ts.rejected {
			if n := ts.rejected[q].Load(); n > 0 {
				st.Rejected[quotaNames[q]] = n
			}
		}
		out = append(out, st)
	}
	return out
}
