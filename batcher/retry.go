package batcher

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Retry defaults, from the seed design.
const (
	DefaultMaxRetries       = 3
	DefaultInitialBackoff   = time.Second
	DefaultBackoffFactor    = 2.0
	DefaultMaxBackoff       = 10 * time.Second
	DefaultRetryBudgetRatio = 0.3
	DefaultRetryBudgetMin   = 10
	DefaultRetryWindow      = 10 * time.Second
)

// RetryPolicy says which failed requests are tried again and when.
//
// Rate limits, timeouts, network and server errors are retried; an unknown
// error or an invalid response (a garbled answer) once; auth and invalid
// requests never. The wait
// before retry n (from 0) is drawn uniformly from [0, min(MaxBackoff,
// InitialBackoff×Factor^n)] (full jitter), and is at least the upstream's
// Retry-After. A retry that would outlast the request's deadline is not made:
// the request fails with its last error.
type RetryPolicy struct {
	// MaxRetries per request. Default DefaultMaxRetries; negative: none.
	MaxRetries int
	// InitialBackoff, Factor and MaxBackoff shape the backoff. Defaults
	// DefaultInitialBackoff, DefaultBackoffFactor, DefaultMaxBackoff.
	InitialBackoff time.Duration
	Factor         float64
	MaxBackoff     time.Duration
	// BudgetRatio caps retried requests at this share of the requests sent
	// to the backend over BudgetWindow, beyond a floor of BudgetMin retries a
	// second that are always allowed (so that a quiet backend can still
	// retry). Defaults DefaultRetryBudgetRatio, DefaultRetryWindow,
	// DefaultRetryBudgetMin. The default ratio is 30%, not the common 20%:
	// with 20% of calls failing transiently, retries make up 20% of all
	// requests sent, and a 20% budget would refuse some of them.
	BudgetRatio  float64
	BudgetWindow time.Duration
	BudgetMin    int
}

func (p RetryPolicy) resolve() (RetryPolicy, error) {
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	p.MaxRetries = max(p.MaxRetries, 0)
	if p.InitialBackoff == 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.Factor == 0 {
		p.Factor = DefaultBackoffFactor
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(DefaultMaxBackoff, p.InitialBackoff)
	}
	if p.BudgetRatio == 0 {
		p.BudgetRatio = DefaultRetryBudgetRatio
	}
	if p.BudgetWindow == 0 {
		p.BudgetWindow = DefaultRetryWindow
	}
	if p.BudgetMin == 0 {
		p.BudgetMin = DefaultRetryBudgetMin
	}
	switch {
	case p.InitialBackoff < 0:
		return p, badSetting("initial_backoff", "must be positive, got %v", p.InitialBackoff)
	case p.Factor < 1 || p.Factor != p.Factor:
		return p, badSetting("factor", "must be at least 1, got %v", p.Factor)
	case p.MaxBackoff < p.InitialBackoff:
		return p, badSetting("max_backoff", "must be at least the initial backoff %v, got %v", p.InitialBackoff, p.MaxBackoff)
	case p.BudgetRatio < 0 || p.BudgetRatio > 1 || p.BudgetRatio != p.BudgetRatio:
		return p, badSetting("budget_ratio", "must be 0 to 1, got %v", p.BudgetRatio)
	case p.BudgetWindow < time.Second:
		return p, badSetting("budget_window", "must be at least 1s, got %v", p.BudgetWindow)
	case p.BudgetMin < 0:
		return p, badSetting("budget_min", "must not be negative, got %d", p.BudgetMin)
	}
	return p, nil
}

// backoff returns the wait before retry n (0 for the first retry).
func (p *RetryPolicy) backoff(n int) time.Duration {
	ceil := float64(p.InitialBackoff)
	for range n {
		ceil *= p.Factor
		if ceil >= float64(p.MaxBackoff) {
			break
		}
	}
	ceil = min(ceil, float64(p.MaxBackoff))
	return time.Duration(rand.Float64() * ceil)
}

// retryable reports whether an error of class c may be retried, given how
// many unknown errors the request already retried.
func retryable(c ErrorClass, unknownRetries int) bool {
	switch c {
	case ClassRateLimit, ClassTimeout, ClassNetwork, ClassServer:
		return true
	case ClassUnknown, ClassInvalidResponse:
		// Once: a garbled answer (a 200 with a malformed body) or an
		// unknown failure may be a fluke; twice is not.
		return unknownRetries == 0
	}
	return false
}

// classify returns err's class. A deadline hit by the attempt's own timeout
// is a timeout.
func classify(err error) ErrorClass {
	if err == nil {
		return ClassUnknown
	}
	var ue *UpstreamError
	switch {
	case errors.As(err, &ue):
		return ue.Class
	case errors.Is(err, errAttemptTimeout):
		return ClassTimeout
	}
	return ClassUnknown
}

var errAttemptTimeout = errors.New("upstream call timed out")

// retryAfter returns the upstream's Retry-After in err, if any.
func retryAfter(err error) time.Duration {
	var ue *UpstreamError
	if errors.As(err, &ue) && ue.RateLimit != nil {
		return ue.RateLimit.RetryAfter
	}
	return 0
}

// retryBudget caps retries at a share of calls over a sliding window, kept
// in one-second buckets.
type retryBudget struct {
	ratio  float64
	floor  int
	bucket time.Duration

	mu      sync.Mutex
	start   time.Time // start of buckets[head]
	head    int
	calls   []int
	retries []int
}

func newRetryBudget(p RetryPolicy) *retryBudget {
	n := max(int(p.BudgetWindow/time.Second), 1)
	floor := int(float64(p.BudgetMin) * p.BudgetWindow.Seconds())
	return &retryBudget{ratio: p.BudgetRatio, floor: floor, bucket: p.BudgetWindow / time.Duration(n),
		calls: make([]int, n), retries: make([]int, n)}
}

// advanceLocked rotates the buckets up to now.
func (rb *retryBudget) advanceLocked(now time.Time) {
	if rb.start.IsZero() {
		rb.start = now
		return
	}
	for i := 0; now.Sub(rb.start) >= rb.bucket; i++ {
		if i >= len(rb.calls) { // idle for a whole window
			clear(rb.calls)
			clear(rb.retries)
			rb.start = now
			return
		}
		rb.head = (rb.head + 1) % len(rb.calls)
		rb.calls[rb.head], rb.retries[rb.head] = 0, 0
		rb.start = rb.start.Add(rb.bucket)
	}
}

// sent books n requests sent upstream.
func (rb *retryBudget) sent(now time.Time, n int) {
	rb.mu.Lock()
	rb.advanceLocked(now)
	rb.calls[rb.head] += n
	rb.mu.Unlock()
}

// allow books a retry if the budget has room for it.
func (rb *retryBudget) allow(now time.Time) bool {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	rb.advanceLocked(now)
	calls, retries := 0, 0
	for i := range rb.calls {
		calls += rb.calls[i]
		retries += rb.retries[i]
	}
	if retries >= rb.floor && float64(retries+1) > rb.ratio*float64(calls) {
		return false
	}
	rb.retries[rb.head]++
	return true
}

// retryLater sends c back to its lane after a backoff, if the policy, the
// retry budget and c's deadline allow; r is the run c failed in. The
// deadline must leave the attempt its least time (leastAttempt) after the
// backoff: an attempt that cannot finish only spends the provider's budget.
func (b *Batcher) retryLater(c *Call, r *batchRun, err error, now time.Time) bool {
	be := r.be
	p := c.req.retryPolicy(&be.cfg.Retry)
	class := classify(err)
	if !retryable(class, int(c.unknownRetries)) || int(c.retries) >= p.MaxRetries {
		return false
	}
	if b.aborted.Load() {
		return false // abort's sweep of b.retrying may be over: end with the error
	}
	delay := max(p.backoff(int(c.retries)), retryAfter(err))
	if b.clock.monoOf(now.Add(delay+leastAttempt(be.cfg.AttemptTimeout))) >= c.deadline || !be.retry.allow(now) {
		return false
	}
	if !c.run.CompareAndSwap(r, nil) {
		return false // it ended meanwhile
	}
	c.retries++
	if class == ClassUnknown || class == ClassInvalidResponse {
		c.unknownRetries++
	}
	be.stats.retries[class].Add(1)
	c.retryEvent(now, class, delay)
	c.emit(Event{Kind: EventRetrying, Time: now, Attempt: int(c.attempts), Delay: delay, Class: class, Err: err})
	be.send(bmsg{kind: bmRetry, c: c, at: now.Add(delay)}) // the backend's owner holds it until then
	return true
}

// fallBack moves c to its route's next target when its retries on this one
// are used up (or refused) on a failure that another upstream may not
// have: a network or server error, a timeout, a rate limit. It does so
// only while c's deadline leaves the next target's attempt its least time
// (leastAttempt); the new target gets retries of its own. r is the run c
// failed in.
func (b *Batcher) fallBack(c *Call, r *batchRun, err error, now time.Time) bool {
	switch classify(err) {
	case ClassNetwork, ClassServer, ClassTimeout, ClassRateLimit:
	default:
		return false
	}
	next := int(c.target) + 1
	if next >= len(c.rc.targets) || c.b.clock.monoOf(now.Add(leastAttempt(c.rc.targets[next].be.cfg.AttemptTimeout))) >= c.deadline ||
		!c.run.CompareAndSwap(r, nil) {
		return false
	}
	c.target = uint8(next)
	c.retries, c.unknownRetries = 0, 0
	r.be.stats.fallbacks.Add(1)
	r.be.log.fellBack(c, c.rc.Name, c.target, err)
	b.enqueue(c)
	return true
}

// leastAttempt is the least time a retry or a fallback must have before
// the request's deadline for it to start: the automatic attempt timeout's
// minimum, or a configured attempt timeout when that is shorter.
func leastAttempt(configured time.Duration) time.Duration {
	if configured > 0 {
		return min(configured, minAttemptTimeout)
	}
	return minAttemptTimeout
}

// retryQueue holds the calls waiting out a retry backoff, earliest first
// (a binary heap), with one timer for the earliest. The backend's owner
// owns it: a dispatch worker that books a retry sends it a message, and
// the owner requeues each call when its backoff ends, or ends it at
// Shutdown's abort.
type retryQueue struct {
	calls []retryWait
	timer *time.Timer
	at    time.Time // when timer fires; zero when stopped
}

type retryWait struct {
	at time.Time
	c  *Call
}

func (q *retryQueue) push(w retryWait) {
	q.calls = append(q.calls, w)
	for i := len(q.calls) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.calls[i].at.Before(q.calls[p].at) {
			break
		}
		q.calls[i], q.calls[p] = q.calls[p], q.calls[i]
		i = p
	}
}

func (q *retryQueue) pop() retryWait {
	top := q.calls[0]
	n := len(q.calls) - 1
	q.calls[0] = q.calls[n]
	q.calls[n] = retryWait{}
	q.calls = q.calls[:n]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && q.calls[l].at.Before(q.calls[m].at) {
			m = l
		}
		if r < n && q.calls[r].at.Before(q.calls[m].at) {
			m = r
		}
		if m == i {
			break
		}
		q.calls[i], q.calls[m] = q.calls[m], q.calls[i]
		i = m
	}
	return top
}

// arm sets the timer for the earliest backoff's end.
func (q *retryQueue) arm(now time.Time) {
	if len(q.calls) == 0 {
		q.at = time.Time{}
		q.timer.Stop()
		return
	}
	if at := q.calls[0].at; !at.Equal(q.at) {
		q.at = at
		q.timer.Reset(at.Sub(now))
	}
}

// retryOwned holds c until at. After Shutdown's abort it ends c instead:
// the abort's sweep of the queue may be over.
func (s *backendState) retryOwned(c *Call, at, now time.Time) {
	if s.b.aborted.Load() {
		c.finish(Result{Err: ErrShutdown}, now)
		return
	}
	s.retrying.push(retryWait{at: at, c: c})
	s.retrying.arm(now)
}

// requeueDue ends the backoffs that are over: each call still pending goes
// back into its lane.
func (s *backendState) requeueDue(now time.Time) {
	q := &s.retrying
	for len(q.calls) > 0 && !q.calls[0].at.After(now) {
		if c := q.pop().c; c.pending() {
			s.b.enqueue(c)
		}
	}
	q.at = time.Time{}
	q.arm(now)
}

// abortRetries ends every call waiting out a backoff with ErrShutdown.
func (s *backendState) abortRetries(now time.Time) {
	q := &s.retrying
	for len(q.calls) > 0 {
		q.pop().c.finish(Result{Err: ErrShutdown}, now)
	}
	q.arm(now)
}
