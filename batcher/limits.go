package batcher

import (
	"errors"
	"log/slog"
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

// permit is a granted dispatch: one concurrency slot plus the requests and
// tokens reserved for it, from its grant to its release. Its lane owns it
// until it hands it to a dispatch worker with the batch; then the worker
// owns it and releases it.
type permit struct {
	cost
	protected bool         // granted to URGENT or HIGH work
	borrowed  bool         // a protected slot lent to background work
	done      func(error)  // the breaker's verdict; errUnused when never used
	spentAt   [2]uint64    // the buckets' spend counters right after the grant
	rpm, tpm  *reservation // nil where the backend has no such budget
}

// reservation is what a permit took from one bucket.
type reservation struct {
	r     *rate.Reservation // nil when credit covered it all
	taken int               // tokens taken, from the bucket and the credit
	at    time.Time
}

// waiter is a lane waiting for a permit. The backend holds one per lane.
type waiter struct {
	l     *lane
	p     Priority
	since time.Time // its best call's admission: ranks age from it
	cost  cost
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

// perSecond is a bucket's default burst: one second's worth of a per-minute
// limit, until the upstream's headers say more (see bucket.learnBurst).
func perSecond(perMinute int) int { return max(1, perMinute/60) }

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

// protectedSlots is how many of the concurrency limit URGENT and HIGH work
// may always have.
func (s *backendState) protectedSlots() int {
	return int(float64(s.limitLocked()) * s.cfg.ProtectedShare)
}

// limitLocked is the concurrency limit now: the adaptive limit, within the
// slots the fleet leaves this replica.
func (s *backendState) limitLocked() int {
	if s.fleetSlots > 0 && s.fleetSlots < s.limit {
		return s.fleetSlots
	}
	return s.limit
}

// ask registers (or updates) l's wait for a permit and runs the grant
// function. It returns the permit when l got one at once; otherwise l waits
// for a grant message, and ask returns how long the rate budget alone will
// make it wait and which budget. It fails with errBreakerOpen when the
// backend takes no calls: l is then no longer registered.
func (s *backendState) ask(w waiter) (*permit, time.Duration, string, error) {
	s.mu.Lock()
	if s.open() {
		s.dropLocked(w.l)
		s.mu.Unlock()
		return nil, 0, "", errBreakerOpen
	}
	now := time.Now()
	if i := s.indexLocked(w.l); i >= 0 {
		s.waiters[i] = w
	} else {
		s.waiters = append(s.waiters, w)
	}
	grants, mine := s.grantLocked(now, w.l)
	var wait time.Duration
	var by string
	if mine == nil {
		if s.open() { // the grant round found the breaker just opened
			s.dropLocked(w.l)
			s.mu.Unlock()
			deliver(grants)
			return nil, 0, "", errBreakerOpen
		}
		_, wait, by, _ = s.checkLocked(w, now, s.protectedWaitingLocked())
		if by == "" {
			by = budgetConcurrency // others rank first
		}
		s.stats.waited(by)
	}
	s.mu.Unlock()
	deliver(grants)
	return mine, wait, by, nil
}

func (s *backendState) indexLocked(l *lane) int {
	for i := range s.waiters {
		if s.waiters[i].l == l {
			return i
		}
	}
	return -1
}

func (s *backendState) dropLocked(l *lane) {
	if i := s.indexLocked(l); i >= 0 {
		s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
	}
}

// drop ends l's wait for a permit. A permit already granted to l is on its
// way as a message; l's owner gives it back when it arrives.
func (s *backendState) drop(l *lane) {
	s.mu.Lock()
	s.dropLocked(l)
	s.mu.Unlock()
}

func (s *backendState) rank(w *waiter, now time.Time) time.Duration {
	return time.Duration(w.p.level())*s.aging - now.Sub(w.since)
}

func (s *backendState) protectedWaitingLocked() bool {
	for i := range s.waiters {
		if !s.waiters[i].p.background() {
			return true
		}
	}
	return false
}

// checkLocked reports whether every budget allows w now. Otherwise it says
// which budget is short, for a rate budget how long until it allows, and
// whether only the protected share holds w back (so that more urgent work
// behind it may still go).
//
// Lending: while no URGENT or HIGH work waits, background work may use the
// protected slots and the protected part of the buckets (as Kubernetes API
// Priority and Fairness lends seats between levels). Once such work waits,
// lending stops: a freed slot goes to it before any background work, and
// background work must leave the protected share in each bucket again, so
// that share refills first.
func (s *backendState) checkLocked(w waiter, now time.Time, protectedWaiting bool) (ok bool, wait time.Duration, by string, shareOnly bool) {
	hold := w.p.background() && (protectedWaiting || s.cfg.StrictProtectedShare)
	limit := s.limitLocked()
	if s.inFlight >= limit {
		return false, 0, budgetConcurrency, false
	}
	if hold && s.inFlight >= limit-s.protectedSlots() {
		return false, 0, budgetConcurrency, true
	}
	if now.Before(s.pausedUntil) {
		return false, s.pausedUntil.Sub(now), budgetPause, false
	}
	share := 0.0
	if hold {
		share = s.cfg.ProtectedShare
	}
	for _, b := range [...]struct {
		b    *bucket
		need int
		name string
	}{{&s.rpm, w.cost.requests, budgetRPM}, {&s.tpm, w.cost.tokens, budgetTPM}} {
		d, short, onlyShare := b.b.waitFor(now, b.need, share)
		if short && d >= wait {
			wait, by, shareOnly = max(d, time.Millisecond), b.name, onlyShare
		}
	}
	return by == "", wait, by, shareOnly && by != ""
}

// grantLocked is the one grant function: it hands permits to waiters, best
// rank first, while the budgets allow. A waiter held back only by the
// protected share does not block more urgent work behind it; any other
// shortage stops the round (the rate timer is armed for it). It returns
// the grants for other lanes, to deliver once mu is released, and self's
// permit when self got one.
func (s *backendState) grantLocked(now time.Time, self *lane) (out []grant, mine *permit) {
	if len(s.waiters) == 0 {
		return nil, nil
	}
	ws := s.waiters
	// Sort by rank; the list is short (one entry per waiting lane).
	for i := 1; i < len(ws); i++ {
		for j := i; j > 0 && s.rank(&ws[j], now) < s.rank(&ws[j-1], now); j-- {
			ws[j], ws[j-1] = ws[j-1], ws[j]
		}
	}
	protectedWaiting := s.protectedWaitingLocked()
	for i := 0; i < len(s.waiters); {
		w := s.waiters[i]
		ok, wait, by, shareOnly := s.checkLocked(w, now, protectedWaiting)
		if ok {
			pm, err := s.takeLocked(w, now, protectedWaiting)
			if err != nil { // half-open with its probes out, or just opened
				if s.open() {
					// Just opened: every waiter must hear it now, to fail over.
					for _, w := range s.waiters {
						if w.l == self {
							continue
						}
						out = append(out, grant{l: w.l})
					}
					s.waiters = s.waiters[:0]
				}
				return out, mine // a probe's end calls again
			}
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			if w.l == self {
				mine = pm
			} else {
				out = append(out, grant{w.l, pm})
			}
			if !w.p.background() {
				protectedWaiting = s.protectedWaitingLocked()
			}
			continue
		}
		if shareOnly {
			i++
			continue // only the protected share is left: look for urgent work
		}
		if by != budgetConcurrency {
			s.armLocked(now, wait)
		}
		break
	}
	return out, mine
}

// takeLocked books a permit for w: a slot, the breaker's leave and the
// reservations. The caller has checked that the budgets allow it.
func (s *backendState) takeLocked(w waiter, now time.Time, protectedWaiting bool) (*permit, error) {
	done, err := s.brk.Allow()
	if err != nil {
		return nil, err
	}
	pm := &permit{cost: w.cost, done: done, protected: !w.p.background()}
	if w.p.background() && s.inFlight >= s.limitLocked()-s.protectedSlots() {
		pm.borrowed = true
		s.borrowed++
	}
	s.inFlight++
	s.inFlightA.Store(int32(s.inFlight))
	pm.rpm = s.rpm.take(now, w.cost.requests)
	pm.tpm = s.tpm.take(now, w.cost.tokens)
	pm.spentAt = [2]uint64{s.rpm.spent, s.tpm.spent}
	return pm, nil
}

// armLocked makes the backend run the grant function again after wait.
func (s *backendState) armLocked(now time.Time, wait time.Duration) {
	if wait <= 0 {
		return
	}
	at := now.Add(wait)
	if !s.timerAt.IsZero() && !s.timerAt.After(at) && s.timerAt.After(now) {
		return // an earlier look is set already
	}
	s.timerAt = at
	if s.timer == nil {
		s.timer = time.AfterFunc(wait, s.wake)
		return
	}
	s.timer.Reset(wait)
}

// wake is the rate timer's arm of the grant path.
func (s *backendState) wake() {
	s.mu.Lock()
	s.timerAt = time.Time{}
	grants, _ := s.grantLocked(time.Now(), nil)
	s.mu.Unlock()
	deliver(grants)
}

// grant is a permit for a lane; a nil p only tells the lane to look at the
// backend again (its breaker opened).
type grant struct {
	l *lane
	p *permit
}

// deliver hands out permits outside the backend's lock.
func deliver(gs []grant) {
	for _, g := range gs {
		g.l.grant(g.p)
	}
}

// release ends a permit. used is what its batch spent of the budgets
// (the zero cost for a permit never used): the rest of what it reserved is
// refunded. verdict goes to the breaker.
func (s *backendState) release(pm *permit, used cost, verdict error) {
	if pm.done != nil {
		pm.done(verdict)
	}
	s.mu.Lock()
	now := time.Now()
	s.inFlight--
	s.inFlightA.Store(int32(s.inFlight))
	if pm.borrowed {
		s.borrowed--
	}
	s.rpm.refund(now, pm.rpm, used.requests)
	s.tpm.refund(now, pm.tpm, used.tokens)
	grants, _ := s.grantLocked(now, nil)
	s.mu.Unlock()
	deliver(grants)
}

// giveBack returns an unused permit in full: a call that never ran says
// nothing about the backend's health.
func (s *backendState) giveBack(pm *permit) { s.release(pm, cost{}, errUnused) }

// settle trims a permit to the batch actually cut, before dispatch.
func (s *backendState) settle(pm *permit, cut cost) {
	if pm.rpm == nil && pm.tpm == nil {
		pm.cost = cut
		return
	}
	if pm.cost == cut {
		return
	}
	s.mu.Lock()
	now := time.Now()
	if pm.rpm != nil && cut.requests < pm.requests {
		s.rpm.refund(now, pm.rpm, cut.requests)
		pm.rpm.taken = cut.requests
	}
	if pm.tpm != nil && cut.tokens < pm.tokens {
		s.tpm.refund(now, pm.tpm, cut.tokens)
		pm.tpm.taken = cut.tokens
	}
	pm.cost = cut
	s.mu.Unlock()
}

// onSuccess books a call the upstream accepted, and climbs back towards the
// configured limits after a run of them.
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

// bucket is one rate budget (requests or tokens per minute): a
// rate.Limiter, configured or learned from the upstream's headers.
//
// rate.Limiter has no partial refund: Reservation.CancelAt restores a whole
// reservation, and only before it acts. A permit whose reservation has not
// acted yet is cancelled that way; tokens given back after that (a batch
// cut smaller than its permit, a reply that used fewer tokens than
// reserved, an upstream that says it has more left than we thought) go to
// credit, which the next reservations draw on first. Credit never lifts
// the bucket past its burst: what the limiter holds plus the credit is
// capped at the burst whenever either is read.
type bucket struct {
	lim        *rate.Limiter // nil: no limit known (yet)
	perMinute  int           // the configured rate; 0: learned from headers
	learnBurst bool          // the burst was not configured: follow the upstream's limit header
	credit     float64
	spent      uint64 // tokens taken so far, to tell what was spent after a grant
	// share is the part of the budget this replica holds alone (1 but while
	// a fleet's store is unreachable); the limiter holds share of the rate
	// and of baseBurst, the burst configured or learned.
	share     float64
	baseBurst int
}

func newBucket(perMinute, burst int, burstSet bool) bucket {
	b := bucket{perMinute: perMinute, learnBurst: !burstSet, share: 1, baseBurst: burst}
	if perMinute > 0 {
		b.lim = rate.NewLimiter(rate.Limit(float64(perMinute)/60), burst)
	}
	return b
}

// shareOf returns f of n, at least 1.
func shareOf(n int, f float64) int { return max(1, int(math.Round(float64(n)*f))) }

// setShare scales the bucket to f of the budget.
func (b *bucket) setShare(now time.Time, f float64) {
	old := b.share
	b.share = f
	if b.lim == nil || old == f {
		return
	}
	b.lim.SetLimitAt(now, b.lim.Limit()*rate.Limit(f/old))
	b.lim.SetBurstAt(now, shareOf(b.baseBurst, f))
	b.tokensAt(now) // caps the credit
}

// rate returns the whole budget (not this replica's share), for the fleet.
func (b *bucket) rate() Rate {
	if b.lim == nil {
		return Rate{}
	}
	if b.perMinute > 0 {
		return Rate{PerMinute: float64(b.perMinute), Burst: b.baseBurst, Adaptive: true}
	}
	return Rate{PerMinute: float64(b.lim.Limit()) * 60 / b.share, Burst: b.baseBurst}
}

// tokensAt returns what the bucket holds at now, credit included.
func (b *bucket) tokensAt(now time.Time) float64 {
	have := b.lim.TokensAt(now)
	b.credit = max(0, min(b.credit, float64(b.lim.Burst())-have))
	return have + b.credit
}

// waitFor reports whether need must wait, and how long, when share of the
// burst must stay in the bucket. onlyShare says that it would not wait
// without the share.
func (b *bucket) waitFor(now time.Time, need int, share float64) (time.Duration, bool, bool) {
	if b.lim == nil || need <= 0 {
		return 0, false, false
	}
	// A batch larger than the bucket waits for a full bucket (less the
	// share), then goes into debt.
	burst := b.lim.Burst()
	reserve := math.Floor(float64(burst) * share)
	want := min(float64(need), float64(burst)-reserve) + reserve
	have := b.tokensAt(now)
	if have >= want {
		return 0, false, false
	}
	d := time.Duration((want - have) / float64(b.lim.Limit()) * float64(time.Second))
	return d, true, have >= min(float64(need), float64(burst))
}

// take reserves n tokens at now: credit first, then the limiter (into debt
// past its burst).
func (b *bucket) take(now time.Time, n int) *reservation {
	if b.lim == nil {
		return nil
	}
	res := &reservation{taken: n, at: now}
	b.spent += uint64(max(n, 0))
	b.tokensAt(now) // caps the credit
	fromCredit := math.Floor(min(float64(n), b.credit))
	b.credit -= fromCredit
	rest := n - int(fromCredit)
	burst := b.lim.Burst()
	for first := true; rest > 0; first = false {
		r := b.lim.ReserveN(now, min(rest, burst))
		if first {
			res.r = r
		}
		rest -= burst
	}
	return res
}

// refund gives back what res took beyond used.
func (b *bucket) refund(now time.Time, res *reservation, used int) {
	if b.lim == nil || res == nil || used >= res.taken {
		return
	}
	back := res.taken - max(used, 0)
	if used <= 0 && res.r != nil && res.taken <= b.lim.Burst() && !now.After(res.at.Add(res.r.DelayFrom(res.at))) {
		// Not acted yet: the documented cancel restores it.
		res.r.CancelAt(now)
		res.r = nil
		res.taken = 0
		return
	}
	b.credit += float64(back)
	b.tokensAt(now) // caps it
}

// observation is what one header set told a bucket.
type observation struct {
	grew  bool          // the budget grew: waiters may go
	pause time.Duration // no rate known and nothing left: pause this long
}

// observe follows the upstream's limit, remaining count and reset (time
// until full again) for this budget. spentAt is the bucket's spend counter
// right after the call was granted: what was spent since then, the
// upstream had not counted yet when it answered.
//
// Without a configured rate it learns one: limit, remaining and reset give
// the refill rate ((limit - remaining) / reset) and the burst (limit). It
// then holds what the upstream says is left, less what we spent since, so
// that an exhausted upstream costs only the wait for the next batch's
// tokens, never the whole reset. With a configured rate, the bucket drains
// to what the upstream says is left, and its burst follows the limit header
// when no burst was configured. A bucket is lifted to the upstream's figure
// only when it was just learned or found larger: stale headers cannot lift
// it.
func (b *bucket) observe(now time.Time, limit, remaining int64, reset time.Duration, spentAt uint64) observation {
	var o observation
	if remaining < 0 {
		return o
	}
	if b.perMinute == 0 && limit <= 0 {
		if remaining == 0 && reset > 0 {
			o.pause = min(reset, unknownLimitPause)
		}
		return o
	}
	if b.perMinute == 0 {
		r := float64(limit) / 60 // OpenAI's limits are per minute
		if reset > 0 && limit > remaining {
			r = float64(limit-remaining) / reset.Seconds()
		}
		r = min(max(r, float64(limit)/3600), float64(limit)) * b.share
		if b.lim == nil {
			b.lim = rate.NewLimiter(rate.Limit(r), shareOf(int(limit), b.share))
			b.baseBurst = int(limit)
			o.grew = true
		} else {
			b.lim.SetLimitAt(now, rate.Limit(r))
		}
	}
	if b.learnBurst && limit > 0 && int(limit) != b.baseBurst {
		if int(limit) > b.baseBurst {
			o.grew = true
		}
		b.baseBurst = int(limit)
		b.lim.SetBurstAt(now, shareOf(b.baseBurst, b.share))
	}
	since := float64(b.spent - min(spentAt, b.spent))
	target := float64(remaining) - since
	have := b.tokensAt(now)
	switch {
	case have > target+0.5:
		b.drainLocked(now, have, target)
	case target > have+0.5 && o.grew:
		// The bucket was just learned, or found larger than assumed: take
		// what the upstream says is left. Otherwise the bucket only ever
		// drains to the upstream's figure and refills at its own rate, so
		// that stale headers (counters that lag) cannot lift it.
		b.credit += target - have
		b.tokensAt(now)
		o.grew = true
	}
	return o
}

// drainLocked takes the bucket down from have to target (at least 0): a
// reservation taken and never given back.
func (b *bucket) drainLocked(now time.Time, have, target float64) {
	n := math.Ceil(have - max(target, 0))
	c := min(b.credit, n)
	b.credit -= c
	for rest, burst := int(n-c), b.lim.Burst(); rest > 0; rest -= burst {
		b.lim.ReserveN(now, min(rest, burst))
	}
}

// follow sets the bucket to what the fleet's has left (remaining, read
// when the permit whose spend counter was spentAt was booked), less what
// this replica granted since, within its burst. It reports whether the
// bucket grew.
func (b *bucket) follow(now time.Time, remaining float64, spentAt uint64) bool {
	if b.lim == nil || math.IsInf(remaining, 0) || math.IsNaN(remaining) {
		return false
	}
	target := remaining - float64(b.spent-min(spentAt, b.spent))
	have := b.tokensAt(now)
	switch {
	case have > target+0.5:
		b.drainLocked(now, have, target)
	case target > have+0.5:
		b.credit += target - have
		return b.tokensAt(now) > have+0.5 // capped at the burst
	}
	return false
}

// lower halves a configured rate within its floor.
func (b *bucket) lower(now time.Time) {
	if b.lim == nil || b.perMinute == 0 {
		return
	}
	floor := rate.Limit(float64(b.perMinute) / 60 * adaptFloor * b.share)
	b.lim.SetLimitAt(now, max(b.lim.Limit()/2, floor))
}

// raise climbs a configured rate back by a step.
func (b *bucket) raise(now time.Time) {
	if b.lim == nil || b.perMinute == 0 {
		return
	}
	ceil := rate.Limit(float64(b.perMinute) / 60 * b.share)
	if b.lim.Limit() < ceil {
		b.lim.SetLimitAt(now, min(b.lim.Limit()+ceil*adaptStep, ceil))
	}
}

// perMinuteRate returns the bucket's current rate per minute, 0 when none.
func (b *bucket) perMinuteRate() float64 {
	if b.lim == nil {
		return 0
	}
	return float64(b.lim.Limit()) * 60
}
