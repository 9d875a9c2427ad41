package batcher

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"
)

// Budget names, as they appear in errors, events and stats.
const (
	budgetConcurrency = "concurrency"
	budgetRPM         = "rpm"
	budgetTPM         = "tpm"
	budgetPause       = "rate_limit_pause"
	budgetProbe       = "breaker_probe"
)

// How the adaptive limits move: halve on a rate limit, climb back a tenth of
// the configured rate (and one concurrency slot) after each run of
// adaptSuccesses successful calls, never below adaptFloor of the
// configured rate.
const (
	adaptSuccesses = 10
	adaptStep      = 0.1
	adaptFloor     = 0.05
)

// UpstreamCaller is implemented by backends whose batches do not make exactly
// one upstream call: a fan-out backend makes one per request. route is the
// route callers named, for backends that treat routes differently.
type UpstreamCaller interface {
	UpstreamCalls(route string, op Operation, n int) int
}

// cost is what a batch spends of its backend's budget.
type cost struct {
	requests int // upstream requests (RPM)
	tokens   int // reserved tokens (TPM)
}

// permit is a granted dispatch: one concurrency slot plus the requests and
// tokens reserved for it, and the breaker's verdict callback.
type permit struct {
	cost
	done func(error) // the breaker's; nil when the call never happens
}

// backendState is one backend's budget and scheduler. It hands dispatch
// permits to lanes, best rank first, when a concurrency slot, the rate
// budgets and the breaker all allow. Lanes never hold mu while the backend
// calls into them: the backend only sets a lane's grant and nudges it.
type backendState struct {
	name   string
	impl   Backend
	cfg    BackendConfig
	caller UpstreamCaller // nil: one upstream call a batch
	aging  time.Duration
	stats  *backendStats
	brk    *breaker
	// notClosed mirrors the breaker's state changes.
	notClosed atomic.Bool
	retry     *retryBudget

	mu          sync.Mutex
	inFlight    int // permits out
	limit       int // adaptive concurrency limit
	rpm, tpm    *rate.Limiter
	pausedUntil time.Time
	successes   int // successful calls since the last change
	waiters     []waiter
	timer       *time.Timer // wakes grantLocked when a rate wait ends
}

type waiter struct {
	l     *lane
	p     Priority
	since time.Time
	cost  cost
}

func newBackendState(bc BackendConfig, aging time.Duration) *backendState {
	s := &backendState{
		name:  bc.Name,
		impl:  bc.Backend,
		cfg:   bc,
		aging: aging,
		stats: &backendStats{},
		limit: bc.MaxConcurrency,
		retry: newRetryBudget(bc.Retry),
	}
	s.caller, _ = bc.Backend.(UpstreamCaller)
	if bc.RPM > 0 {
		s.rpm = rate.NewLimiter(rate.Limit(float64(bc.RPM)/60), bc.RPMBurst)
	}
	if bc.TPM > 0 {
		s.tpm = rate.NewLimiter(rate.Limit(float64(bc.TPM)/60), bc.TPMBurst)
	}
	s.brk = newBreaker(bc.Name, bc.Breaker, func(from, to BreakerState) {
		s.notClosed.Store(to != BreakerClosed)
		s.stats.breakerChanged(from, to)
	})
	return s
}

// perSecond is a bucket's burst: one second's worth of a per-minute limit.
func perSecond(perMinute int) int { return max(1, perMinute/60) }

// calls returns the upstream requests a batch of n of route makes.
func (s *backendState) calls(route string, op Operation, n int) int {
	if s.caller == nil {
		return 1
	}
	return s.caller.UpstreamCalls(route, op, n)
}

// limited reports whether the backend has rate budgets, which need to know
// a batch's cost before it is cut.
func (s *backendState) limited() bool { return s.rpm != nil || s.tpm != nil }

// open reports whether the breaker refuses calls.
// The breaker's own State takes a lock and reads the clock, so the hot path
// asks it only when the breaker is not closed (it moves from open to
// half-open when asked after the cooldown).
func (s *backendState) open() bool {
	return s.notClosed.Load() && s.brk.State() == gobreaker.StateOpen
}

var (
	errBreakerOpen = errors.New("circuit open")
	errUnused      = errors.New("permit unused")
)

// acquire asks for a permit for l's next batch. It returns the permit, or
// queues l (to be granted one later through l.grant) and returns how long
// the rate budget alone will make it wait and which budget, or fails with
// errBreakerOpen when the backend takes no calls.
func (s *backendState) acquire(l *lane, p Priority, since time.Time, c cost) (*permit, time.Duration, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open() {
		s.unregisterLocked(l)
		return nil, 0, "", errBreakerOpen
	}
	now := time.Now()
	w := waiter{l: l, p: p, since: since, cost: c}
	s.unregisterLocked(l)
	if len(s.waiters) == 0 || s.rank(w, now) < s.rank(s.bestLocked(now), now) {
		pm, wait, by := s.tryLocked(w, now)
		if pm != nil {
			return pm, 0, "", nil
		}
		if by == budgetProbe && s.open() {
			return nil, 0, "", errBreakerOpen
		}
		s.waiters = append(s.waiters, w)
		s.stats.waited(by)
		s.armLocked(wait, now)
		return nil, wait, by, nil
	}
	// Others go first; the wait is at least what the budget needs for w.
	_, wait, by := s.checkLocked(w, now)
	if by == "" {
		by = budgetConcurrency
	}
	s.waiters = append(s.waiters, w)
	s.stats.waited(by)
	return nil, wait, by, nil
}

func (s *backendState) rank(w waiter, now time.Time) time.Duration {
	return time.Duration(w.p.level())*s.aging - now.Sub(w.since)
}

func (s *backendState) bestLocked(now time.Time) waiter {
	best := s.waiters[0]
	for _, w := range s.waiters[1:] {
		if s.rank(w, now) < s.rank(best, now) {
			best = w
		}
	}
	return best
}

// checkLocked reports whether every budget allows w now. Otherwise it says
// which budget is short and, for a rate budget, how long until it allows.
func (s *backendState) checkLocked(w waiter, now time.Time) (bool, time.Duration, string) {
	share := 0.0
	if w.p.background() {
		share = s.cfg.ProtectedShare
	}
	if s.inFlight >= s.limit-int(float64(s.limit)*share) {
		return false, 0, budgetConcurrency
	}
	if now.Before(s.pausedUntil) {
		return false, s.pausedUntil.Sub(now), budgetPause
	}
	wait, by := time.Duration(0), ""
	for _, b := range []struct {
		lim  *rate.Limiter
		need int
		name string
	}{{s.rpm, w.cost.requests, budgetRPM}, {s.tpm, w.cost.tokens, budgetTPM}} {
		if b.lim == nil {
			continue
		}
		// Background work must leave the protected share in the bucket; a
		// batch larger than what it may take waits for that much, then goes
		// into debt.
		burst := b.lim.Burst()
		reserve := int(math.Floor(float64(burst) * share))
		need := float64(min(b.need, burst-reserve) + reserve)
		if have := b.lim.TokensAt(now); have < need {
			if d := time.Duration((need - have) / float64(b.lim.Limit()) * float64(time.Second)); d >= wait {
				wait, by = max(d, time.Millisecond), b.name
			}
		}
	}
	return by == "", wait, by
}

// tryLocked takes a permit for w if every budget and the breaker allow it.
func (s *backendState) tryLocked(w waiter, now time.Time) (*permit, time.Duration, string) {
	if ok, wait, by := s.checkLocked(w, now); !ok {
		return nil, wait, by
	}
	done, err := s.brk.Allow()
	if err != nil { // half-open with its probes out, or just opened
		return nil, 0, budgetProbe
	}
	s.inFlight++
	spend(s.rpm, now, w.cost.requests)
	spend(s.tpm, now, w.cost.tokens)
	return &permit{cost: w.cost, done: done}, 0, ""
}

// armLocked makes the backend look at its waiters again after wait.
func (s *backendState) armLocked(wait time.Duration, now time.Time) {
	if wait <= 0 {
		return
	}
	if s.timer == nil {
		s.timer = time.AfterFunc(wait, s.wake)
		return
	}
	s.timer.Reset(wait)
}

func (s *backendState) wake() {
	s.mu.Lock()
	grants := s.grantLocked(time.Now())
	s.mu.Unlock()
	deliver(grants)
}

// grant hands l the permit p; a nil p only wakes l to look again.
type grant struct {
	l *lane
	p *permit
}

// grantLocked hands permits to waiters, best rank first. A waiter held back
// only by the protected share does not block more urgent work behind it;
// any other shortage stops the round.
func (s *backendState) grantLocked(now time.Time) []grant {
	var out []grant
	for len(s.waiters) > 0 {
		slices := s.waiters
		// Sort by rank; the list is short (one entry per waiting lane).
		for i := 1; i < len(slices); i++ {
			for j := i; j > 0 && s.rank(slices[j], now) < s.rank(slices[j-1], now); j-- {
				slices[j], slices[j-1] = slices[j-1], slices[j]
			}
		}
		progressed := false
		for i, w := range slices {
			pm, wait, by := s.tryLocked(w, now)
			if pm != nil {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				out = append(out, grant{w.l, pm})
				progressed = true
				break
			}
			if by == budgetConcurrency && w.p.background() && s.inFlight < s.limit {
				continue // only the protected share is left: look for urgent work
			}
			if by == budgetProbe {
				if s.open() {
					// Just opened: every waiter must hear it now, to fail over.
					for _, w := range s.waiters {
						out = append(out, grant{l: w.l})
					}
					s.waiters = s.waiters[:0]
				}
				break // half-open with its probes out: a probe's end calls again
			}
			s.armLocked(wait, now)
			break
		}
		if !progressed {
			break
		}
	}
	return out
}

// deliver hands out permits outside the backend's lock.
func deliver(gs []grant) {
	for _, g := range gs {
		g.l.give(g.p)
	}
}

func (s *backendState) unregisterLocked(l *lane) {
	for i := range s.waiters {
		if s.waiters[i].l == l {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return
		}
	}
}

// unregister drops l from the waiters.
func (s *backendState) unregister(l *lane) {
	s.mu.Lock()
	s.unregisterLocked(l)
	s.mu.Unlock()
}

// release ends a permit whose batch ran (or never will: done is then told
// nothing) and refunds what it reserved beyond used.
func (s *backendState) release(pm *permit, used cost) {
	s.mu.Lock()
	now := time.Now()
	s.inFlight--
	refund(s.rpm, now, pm.requests-used.requests)
	refund(s.tpm, now, pm.tokens-used.tokens)
	grants := s.grantLocked(now)
	s.mu.Unlock()
	deliver(grants)
}

// giveBack returns an unused permit in full.
func (s *backendState) giveBack(pm *permit) {
	if pm.done != nil {
		pm.done(errUnused) // a call that never ran says nothing about health
	}
	s.release(pm, cost{})
}

// extend grows a permit towards want where the budgets allow it now, so
// that a lane granted a permit planned when it held few requests can send
// what it holds by the time the grant arrives. It returns the caps to cut
// with: unlimited for the budgets the backend does not have.
func (s *backendState) extend(pm *permit, want cost, p Priority) cost {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	share := 0.0
	if p.background() {
		share = s.cfg.ProtectedShare
	}
	grow := func(lim *rate.Limiter, have, want int) int {
		if lim == nil {
			return math.MaxInt
		}
		if want > have {
			room := lim.TokensAt(now) - math.Floor(float64(lim.Burst())*share)
			if add := min(want-have, int(room)); add > 0 {
				spend(lim, now, add)
				have += add
			}
		}
		return have
	}
	caps := cost{requests: grow(s.rpm, pm.requests, want.requests), tokens: grow(s.tpm, pm.tokens, want.tokens)}
	if s.rpm != nil {
		pm.requests = caps.requests
	}
	if s.tpm != nil {
		pm.tokens = caps.tokens
	}
	return caps
}

// settle trims a permit to the batch actually cut, before dispatch.
func (s *backendState) settle(pm *permit, cut cost) {
	s.mu.Lock()
	now := time.Now()
	refund(s.rpm, now, pm.requests-cut.requests)
	refund(s.tpm, now, pm.tokens-cut.tokens)
	pm.cost = cut
	s.mu.Unlock()
}

// spend takes n tokens from lim, going into debt past its burst.
func spend(lim *rate.Limiter, now time.Time, n int) {
	if lim == nil {
		return
	}
	for burst := lim.Burst(); n > 0; n -= burst {
		lim.ReserveN(now, min(n, burst))
	}
}

// refund gives n tokens back to lim (n < 0 charges them). rate.Limiter has
// no refund call; a reservation of -n tokens adds n, and the bucket caps at
// its burst as time next advances. TestRefund pins this behaviour.
func refund(lim *rate.Limiter, now time.Time, n int) {
	switch {
	case lim == nil || n == 0:
	case n > 0:
		lim.ReserveN(now, -n)
	default:
		spend(lim, now, -n)
	}
}

// onSuccess books a call the upstream accepted, and climbs back towards the
// configured limits after a run of them.
func (s *backendState) onSuccess(info *RateLimitInfo) {
	s.mu.Lock()
	now := time.Now()
	s.observeLocked(info, now)
	s.successes++
	var grants []grant
	if s.successes >= adaptSuccesses {
		s.successes = 0
		raise(s.rpm, now, s.cfg.RPM)
		raise(s.tpm, now, s.cfg.TPM)
		if s.limit < s.cfg.MaxConcurrency {
			s.limit++
			grants = s.grantLocked(now)
		}
	}
	s.mu.Unlock()
	deliver(grants)
}

// onRateLimited books an upstream 429: halve the rates and the concurrency
// (within their floors) and pause for the upstream's Retry-After.
func (s *backendState) onRateLimited(info *RateLimitInfo) {
	s.stats.rateLimited.Add(1)
	s.mu.Lock()
	now := time.Now()
	s.successes = 0
	lower(s.rpm, now, s.cfg.RPM)
	lower(s.tpm, now, s.cfg.TPM)
	s.limit = max(s.cfg.MinConcurrency, s.limit/2)
	s.observeLocked(info, now)
	if info != nil && info.RetryAfter > 0 {
		s.pauseLocked(now.Add(info.RetryAfter))
	}
	s.mu.Unlock()
}

// observeLocked follows what the upstream said of its remaining budget: our
// buckets never hold more than it has left. Without a bucket of our own, an
// exhausted budget pauses dispatch until it resets. (With one, a pause would
// double-count: the bucket refills at our rate, and the reset the upstream
// gave may be stale by the time its response arrives.)
func (s *backendState) observeLocked(info *RateLimitInfo, now time.Time) {
	if info == nil {
		return
	}
	drain := func(lim *rate.Limiter, remaining int64, reset time.Duration) {
		switch {
		case remaining < 0:
		case lim == nil:
			if remaining == 0 && reset > 0 {
				s.pauseLocked(now.Add(reset))
			}
		default:
			if have := lim.TokensAt(now); have > float64(remaining) {
				spend(lim, now, int(have)-int(remaining))
			}
		}
	}
	drain(s.rpm, info.RemainingRequests, info.ResetRequests)
	drain(s.tpm, info.RemainingTokens, info.ResetTokens)
}

func (s *backendState) pauseLocked(until time.Time) {
	if until.After(s.pausedUntil) {
		s.pausedUntil = until
		s.armLocked(time.Until(until), until)
	}
}

func lower(lim *rate.Limiter, now time.Time, perMinute int) {
	if lim == nil {
		return
	}
	floor := rate.Limit(float64(perMinute) / 60 * adaptFloor)
	lim.SetLimitAt(now, max(lim.Limit()/2, floor))
}

func raise(lim *rate.Limiter, now time.Time, perMinute int) {
	if lim == nil {
		return
	}
	ceil := rate.Limit(float64(perMinute) / 60)
	lim.SetLimitAt(now, min(lim.Limit()+ceil*adaptStep, ceil))
}
