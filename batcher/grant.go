package batcher

import (
	"time"

	"golang.org/x/time/rate"
)

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
