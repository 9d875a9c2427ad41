package batcher

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
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
// configured rate. Learned rates do not adapt: they are the upstream's own.
const (
	adaptSuccesses = 10
	adaptStep      = 0.1
	adaptFloor     = 0.05
)

// unknownLimitPause is how long an exhausted budget pauses dispatch when the
// upstream gives its remaining count and reset but no limit, so that no rate
// can be learned: long enough not to hammer it, short enough that a reset
// header meaning "full again" (OpenAI's) does not stall a minute.
const unknownLimitPause = time.Second

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

// backendState is one backend's budget and scheduler.
//
// Every permit goes through one grant function, grantLocked: lanes that ask
// (arrivals), permits released and the rate timer all call it, and it hands
// permits out best rank first. Lanes never hold a lock while they ask; the
// backend never calls into a lane while it holds mu: permits for other lanes
// are delivered after mu is released, as messages to their owners.
type backendState struct {
	// Set at construction; read-only, but for cfg's limits (MaxConcurrency,
	// MinConcurrency, RPM, TPM, their bursts, the protected share), which
	// Reconfigure changes in place under mu.
	name   string
	impl   Backend // the configured backend inside the dispatch decorators
	cfg    BackendConfig
	caller UpstreamCaller // nil: one upstream call a batch
	aging  time.Duration
	stats  *backendStats
	brk    *breaker
	retry  *retryBudget
	log    *backendLog    // nil: no logger
	work   chan *batchRun // to the dispatch workers; capacity MaxConcurrency
	shared SharedBudget   // the fleet's budget (coordinator.go); nil: this replica's alone

	// notClosed mirrors the breaker's state changes, for the hot path.
	notClosed atomic.Bool
	// limitedA says that a rate budget is known (configured or learned):
	// lanes then plan a batch's exact cost before they ask.
	limitedA atomic.Bool
	// workersStartedA mirrors workersStarted, for the hot path.
	workersStartedA atomic.Bool
	// inFlightA mirrors inFlight, for Stats and Lanes without mu.
	inFlightA atomic.Int32
	// heldOpenUntil (Unix nanoseconds) is when the fleet stops holding the
	// backend open for another replica's breaker; 0: never held.
	heldOpenUntil atomic.Int64

	mu             sync.Mutex
	workersStarted bool    // the dispatch workers run (on the first batch)
	workersN       int     // how many
	inFlight       int     // permits out
	borrowed       int     // protected slots lent to background work, out now
	limit          int     // adaptive concurrency limit
	fleetSlots     int     // the slots the fleet leaves this replica; 0: no cap
	share          float64 // of the configured budgets this replica holds alone (LocalBudget.Share)
	rpm, tpm       bucket
	pausedUntil    time.Time
	successes      int // successful calls since the last change
	waiters        []waiter
	timer          *time.Timer // calls grantLocked when a rate wait ends
	timerAt        time.Time   // when timer fires; zero when stopped
}

func newBackendState(bc BackendConfig, aging time.Duration, logger *slog.Logger) *backendState {
	s := &backendState{
		name:  bc.Name,
		cfg:   bc,
		aging: aging,
		stats: &backendStats{},
		limit: bc.MaxConcurrency,
		share: 1,
		retry: newRetryBudget(bc.Retry),
		work:  make(chan *batchRun, bc.MaxConcurrency),
		log:   newBackendLog(logger, bc.Name),
	}
	s.caller, _ = bc.Backend.(UpstreamCaller)
	s.impl = decorate(bc.Backend, s)
	s.rpm = newBucket(bc.RPM, bc.RPMBurst, bc.rpmBurstSet)
	s.tpm = newBucket(bc.TPM, bc.TPMBurst, bc.tpmBurstSet)
	s.limitedA.Store(s.rpm.lim != nil || s.tpm.lim != nil)
	s.brk = newBreaker(bc.Name, bc.Breaker, func(from, to BreakerState) {
		s.notClosed.Store(to != BreakerClosed)
		s.stats.breakerChanged(from, to)
		s.log.breaker(from, to)
	})
	return s
}

// calls returns the upstream requests a batch of n of route makes.
func (s *backendState) calls(route string, op Operation, n int) int {
	if s.caller == nil {
		return 1
	}
	return s.caller.UpstreamCalls(route, op, n)
}

// open reports whether the breaker refuses calls.
// The breaker's own State takes a lock and reads the clock, so the hot path
// asks it only when the breaker is not closed (it moves from open to
// half-open when asked after the cooldown).
func (s *backendState) open() bool {
	if s.breakerOpen() {
		return true
	}
	u := s.heldOpenUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// breakerOpen reports whether this replica's own breaker refuses calls.
func (s *backendState) breakerOpen() bool {
	return s.notClosed.Load() && s.brk.State() == gobreaker.StateOpen
}

var (
	errBreakerOpen = errors.New("circuit open")
	errUnused      = errors.New("permit unused")
)

func (s *backendState) onSuccess(pm *permit, info *RateLimitInfo) {
	s.mu.Lock()
	now := time.Now()
	changed := s.observeLocked(pm, info, now)
	s.successes++
	if s.successes >= adaptSuccesses {
		s.successes = 0
		s.rpm.raise(now)
		s.tpm.raise(now)
		if s.limit < s.cfg.MaxConcurrency {
			s.limit++
			changed = true
		}
	}
	var grants []grant
	if changed {
		grants, _ = s.grantLocked(now, nil)
	}
	s.mu.Unlock()
	deliver(grants)
}

// onRateLimited books an upstream 429: halve the configured rates and the
// concurrency (within their floors), follow what the upstream said of its
// budget and pause for its Retry-After.
func (s *backendState) onRateLimited(pm *permit, info *RateLimitInfo) {
	s.stats.rateLimited.Add(1)
	s.mu.Lock()
	now := time.Now()
	s.successes = 0
	s.rpm.lower(now)
	s.tpm.lower(now)
	s.limit = max(s.cfg.MinConcurrency, s.limit/2)
	s.observeLocked(pm, info, now)
	if info != nil && info.RetryAfter > 0 {
		s.pauseLocked(now, now.Add(info.RetryAfter))
		s.log.paused(info.RetryAfter, "429 with Retry-After")
	}
	s.mu.Unlock()
}

// observeLocked follows what the upstream said of its limits after pm's
// call. It reports whether a budget grew, so that waiters may go.
func (s *backendState) observeLocked(pm *permit, info *RateLimitInfo, now time.Time) bool {
	if info == nil {
		return false
	}
	a := s.rpm.observe(now, info.LimitRequests, info.RemainingRequests, info.ResetRequests, pm.spentAt[0])
	b := s.tpm.observe(now, info.LimitTokens, info.RemainingTokens, info.ResetTokens, pm.spentAt[1])
	for _, o := range [...]observation{a, b} {
		if o.pause > 0 {
			s.pauseLocked(now, now.Add(o.pause))
			s.log.paused(o.pause, "budget exhausted, no limit header to learn its rate from")
		}
	}
	s.limitedA.Store(s.rpm.lim != nil || s.tpm.lim != nil)
	return a.grew || b.grew
}

// stopTimer stops the rate timer once the batcher has stopped.
func (s *backendState) stopTimer() {
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

func (s *backendState) pauseLocked(now, until time.Time) {
	if until.After(s.pausedUntil) {
		s.pausedUntil = until
		s.stats.pauses.Add(1)
		s.armLocked(now, until.Sub(now))
	}
}
