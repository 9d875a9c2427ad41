package batcher

import (
	"errors"
	"log/slog"
	"math"
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
// One goroutine, the backend's owner (loop, backendloop.go), holds its
// budgets: the waiting lanes, the permits out, the adaptive limits, the
// buckets, the pause, the rate timer and the calls waiting out a retry
// backoff. Nobody else reads or writes them. Lanes (asking for a permit,
// giving one back, settling one to the batch they cut), dispatch workers
// (releasing a permit with what the upstream said, booking a retry), the
// fleet's coordinator, Reconfigure, Stats and Shutdown send it a message:
// appended to the inbox under inMu, with a nudge through a capacity-1
// channel, as lanes are told things. Every permit reaches its lane the
// same way, as a message (lane.grant), from the one grant function,
// grantOwned, which the owner runs once per step after applying the
// step's messages.
//
// Before the backend's first lane starts its owner (ensureOwner), and once
// Shutdown has stopped it, no goroutine owns the state: a sender then
// applies its message itself, holding inMu, which stands in for the owner.
type backendState struct {
	// Set at construction; read-only. cfg's limit fields (MaxConcurrency,
	// MinConcurrency, RPM, TPM, their bursts, the protected share) change
	// in place under the Batcher's routesMu (setLimits) and are read only
	// there: the owner keeps its own copy in lim, and configured holds
	// them for everyone else.
	name   string
	b      *Batcher // set by commitBackends: the workers' wait group, the requeue of retries
	impl   Backend  // the configured backend inside the dispatch decorators
	cfg    BackendConfig
	caller UpstreamCaller // nil: one upstream call a batch
	aging  time.Duration
	stats  *backendStats
	brk    *breaker
	retry  *retryBudget
	log    *backendLog    // nil: no logger
	work   chan *batchRun // to the dispatch workers; capacity MaxConcurrency
	shared SharedBudget   // the fleet's budget (coordinator.go); nil: this replica's alone

	// configured is cfg as New or the last Reconfigure resolved it.
	configured atomic.Pointer[BackendConfig]
	// notClosed mirrors the breaker's state changes, for the hot path.
	notClosed atomic.Bool
	// limitedA says that a rate budget is known (configured or learned):
	// lanes then plan a batch's exact cost before they ask. Written by the
	// owner, read by lanes.
	limitedA atomic.Bool
	// heldOpenUntil (Unix nanoseconds) is when the fleet stops holding the
	// backend open for another replica's breaker; 0: never held. Written by
	// HoldOpen, read by admission and the owner.
	heldOpenUntil atomic.Int64

	// The inbox and the owner's life, guarded by inMu.
	inMu      sync.Mutex
	inbox     []bmsg
	owner     ownerState // whether a goroutine owns the state
	waitersIn bool       // lanes wait for a permit: a release must wake the owner
	// turn is held by whoever works on the owner's state: the owner
	// goroutine, or a lane applying its own ask (send). Timers that fire
	// while a lane holds it are left to the holder (rateFired, retryFired).
	turn                  bool
	rateFired, retryFired bool
	workersN              int // dispatch workers started
	wantWorkers           int // the configured MaxConcurrency: the workers ensureOwner starts
	trigger               chan struct{}
	nudged                atomic.Bool // a wake-up is pending in trigger: senders set, owner clears

	// Owner-only (see the type's comment).
	spare       []bmsg
	lim         ownerLimits
	inFlight    int     // permits out
	borrowed    int     // protected slots lent to background work, out now
	limit       int     // adaptive concurrency limit
	fleetSlots  int     // the slots the fleet leaves this replica; 0: no cap
	share       float64 // of the configured budgets this replica holds alone (LocalBudget.Share)
	rpm, tpm    bucket
	pausedUntil time.Time
	successes   int // successful calls since the last change
	waiters     []waiter
	asked       []waiter    // lanes that asked in this step: told of a budget wait after the round
	out         []grant     // grants to deliver after the round
	regrant     bool        // run the grant function at the end of the step
	timer       *time.Timer // the rate timer: the grant function again when a rate wait ends
	timerAt     time.Time   // when timer fires; zero when stopped
	retrying    retryQueue  // calls waiting out a backoff (retry.go)
	replies     []bmsg      // queries and acknowledgements, answered after the round
}

// ownerLimits is the owner's copy of the limits that Reconfigure changes
// in place.
type ownerLimits struct {
	maxConc, minConc int
	protectedShare   float64
	strict           bool
}

func limitsOf(bc *BackendConfig) ownerLimits {
	return ownerLimits{maxConc: bc.MaxConcurrency, minConc: bc.MinConcurrency, protectedShare: bc.ProtectedShare, strict: bc.StrictProtectedShare}
}

func newBackendState(bc BackendConfig, aging time.Duration, logger *slog.Logger) *backendState {
	s := &backendState{
		name:        bc.Name,
		cfg:         bc,
		aging:       aging,
		stats:       &backendStats{},
		lim:         limitsOf(&bc),
		limit:       bc.MaxConcurrency,
		share:       1,
		retry:       newRetryBudget(bc.Retry),
		work:        make(chan *batchRun, bc.MaxConcurrency),
		log:         newBackendLog(logger, bc.Name),
		trigger:     make(chan struct{}, 1),
		timer:       time.NewTimer(math.MaxInt64),
		wantWorkers: bc.MaxConcurrency,
	}
	s.timer.Stop()
	s.retrying.timer = time.NewTimer(math.MaxInt64)
	s.retrying.timer.Stop()
	s.configured.Store(&bc)
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

// errUnused is a permit's verdict when its call never ran: it says
// nothing of the backend's health, so the breaker does not count it.
var errUnused = errors.New("permit unused")

// lesson is what a batch's answer taught the budget.
type lesson uint8

const (
	lessonNone        lesson = iota // an error that says nothing of the limits, or a permit unused
	lessonSuccess                   // the upstream accepted the call
	lessonRateLimited               // the upstream answered 429
)

// learnOwned books what pm's call taught. A success climbs back towards
// the configured limits after a run of them. A 429 halves the configured
// rates and the concurrency (within their floors), follows what the
// upstream said of its budget and pauses for its Retry-After.
func (s *backendState) learnOwned(pm *permit, ls lesson, info *RateLimitInfo, now time.Time) {
	switch ls {
	case lessonSuccess:
		if s.observeOwned(pm, info, now) {
			s.regrant = true
		}
		s.successes++
		if s.successes >= adaptSuccesses {
			s.successes = 0
			s.rpm.raise(now)
			s.tpm.raise(now)
			if s.limit < s.lim.maxConc {
				s.limit++
			}
		}
	case lessonRateLimited:
		s.successes = 0
		s.rpm.lower(now)
		s.tpm.lower(now)
		s.limit = max(s.lim.minConc, s.limit/2)
		s.observeOwned(pm, info, now)
		if info != nil && info.RetryAfter > 0 {
			s.pauseOwned(now, now.Add(info.RetryAfter))
			s.log.paused(info.RetryAfter, "429 with Retry-After")
		}
	}
}

// observeOwned follows what the upstream said of its limits after pm's
// call. It reports whether a budget grew, so that waiters may go.
func (s *backendState) observeOwned(pm *permit, info *RateLimitInfo, now time.Time) bool {
	if info == nil {
		return false
	}
	a := s.rpm.observe(now, info.LimitRequests, info.RemainingRequests, info.ResetRequests, pm.spentAt[0])
	b := s.tpm.observe(now, info.LimitTokens, info.RemainingTokens, info.ResetTokens, pm.spentAt[1])
	for _, o := range [...]observation{a, b} {
		if o.pause > 0 {
			s.pauseOwned(now, now.Add(o.pause))
			s.log.paused(o.pause, "budget exhausted, no limit header to learn its rate from")
		}
	}
	s.limitedA.Store(s.rpm.lim != nil || s.tpm.lim != nil)
	return a.grew || b.grew
}

// pauseOwned holds dispatch until until.
func (s *backendState) pauseOwned(now, until time.Time) {
	if until.After(s.pausedUntil) {
		s.pausedUntil = until
		s.stats.pauses.Add(1)
		s.armOwned(now, until.Sub(now))
	}
}
