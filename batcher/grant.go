package batcher

import (
	"fmt"
	"time"

	"golang.org/x/time/rate"
)

// permit is a granted dispatch: one concurrency slot plus the requests and
// tokens reserved for it, from its grant to its release. The backend's
// owner makes it and hands it to a lane as a message; the lane owns it
// until it hands it to a dispatch worker with the batch; then the worker
// owns it and sends it back to the backend's owner with its release. The
// reservations stay the backend owner's: only it reads or writes them.
type permit struct {
	cost
	protected bool         // granted to URGENT or HIGH work
	borrowed  bool         // a protected slot lent to background work
	done      func(error)  // the breaker's verdict; errUnused when never used
	spentAt   [2]uint64    // the buckets' spend counters right after the grant
	rpm, tpm  *reservation // nil where the backend has no such budget
	fleet     *Demand      // the budgets at the grant, for the fleet's booking; nil without a coordinator
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
	seen  uint32 // the grants the lane had received when it asked (lane.grantsSeen)
}

// grant is a permit for a lane; a nil p only tells the lane to look at the
// backend again (its breaker opened).
type grant struct {
	l *lane
	p *permit
}

// The lane's side: messages to the backend's owner.

// ask registers (or updates) w's lane's wait for a permit. The answer comes
// as a message to the lane: a grant (lane.grant), or, when the breaker is
// open or a rate budget alone makes it wait, a refusal (lane.refuse).
func (s *backendState) ask(w waiter) { s.send(bmsg{kind: bmAsk, w: w}) }

// drop ends l's wait for a permit. A permit already granted to l is on its
// way as a message; l's owner gives it back when it arrives.
func (s *backendState) drop(l *lane) { s.send(bmsg{kind: bmDrop, w: waiter{l: l}}) }

// settle trims a permit to the batch actually cut, before dispatch. The
// lane sets the permit's cost; the owner refunds the rest of what its
// reservations took.
func (s *backendState) settle(pm *permit, cut cost) {
	if pm.rpm == nil && pm.tpm == nil {
		pm.cost = cut
		return
	}
	if pm.cost == cut {
		return
	}
	was := pm.cost
	pm.cost = cut
	s.send(bmsg{kind: bmSettle, pm: pm, used: was})
}

// release ends a permit. used is what its batch spent of the budgets
// (the zero cost for a permit never used): the rest of what it reserved is
// refunded. ls and info are what the batch's answer taught the limits;
// verdict, when not nil, goes to the breaker.
func (s *backendState) release(pm *permit, used cost, ls lesson, info *RateLimitInfo, verdict error) {
	if pm.done != nil {
		pm.done(verdict)
	}
	if ls == lessonRateLimited {
		s.stats.rateLimited.Add(1)
	}
	s.send(bmsg{kind: bmRelease, pm: pm, used: used, lesson: ls, info: info})
}

// giveBack returns an unused permit in full: a call that never ran says
// nothing about the backend's health.
func (s *backendState) giveBack(pm *permit) { s.release(pm, cost{}, lessonNone, nil, errUnused) }

// The owner's side.

// askOwned applies a lane's ask. A lane that asks while a grant is on its
// way to it (it has not seen every grant sent) is not registered: the
// grant answers it, and it asks again if it still needs to.
func (s *backendState) askOwned(w waiter) {
	l := w.l
	if w.seen != l.grantsSent {
		return
	}
	if s.open() {
		s.dropOwned(l)
		l.refuse(fmt.Errorf("%w: circuit open on backend %q", ErrNoBackend, s.name))
		return
	}
	if i := s.indexOwned(l); i >= 0 {
		s.waiters[i] = w
	} else {
		s.waiters = append(s.waiters, w)
	}
	s.asked = append(s.asked, w)
	s.regrant = true
}

// answerAsks tells each lane that asked in this step and got no permit in
// the round how long a rate budget alone makes it wait, so that it moves
// the calls the wait would take past their deadlines.
func (s *backendState) answerAsks(now time.Time) {
	protectedWaiting := s.protectedWaitingOwned()
	for i, w := range s.asked {
		s.asked[i] = waiter{}
		if s.indexOwned(w.l) < 0 {
			continue // granted, or dropped
		}
		_, wait, by, _ := s.check(w, now, protectedWaiting)
		if by == "" {
			by = budgetConcurrency // others rank first
		}
		s.stats.waited(by)
		if wait > 0 {
			w.l.refuse(&BudgetError{Backend: s.name, Budget: by, Wait: wait})
		}
	}
	s.asked = s.asked[:0]
}

func (s *backendState) indexOwned(l *lane) int {
	for i := range s.waiters {
		if s.waiters[i].l == l {
			return i
		}
	}
	return -1
}

func (s *backendState) dropOwned(l *lane) {
	if i := s.indexOwned(l); i >= 0 {
		s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
	}
}

// releaseOwned ends a permit: its slot, and what its reservations took
// beyond used.
func (s *backendState) releaseOwned(pm *permit, used cost, now time.Time) {
	s.inFlight--
	if pm.borrowed {
		s.borrowed--
	}
	s.rpm.refund(now, pm.rpm, used.requests)
	s.tpm.refund(now, pm.tpm, used.tokens)
	s.regrant = true
}

// settleOwned refunds what a permit's reservations took beyond the batch
// cut: pm.cost is the cut, was what the permit was granted.
func (s *backendState) settleOwned(pm *permit, was cost, now time.Time) {
	if pm.rpm != nil && pm.requests < was.requests {
		s.rpm.refund(now, pm.rpm, pm.requests)
		pm.rpm.taken = pm.requests
	}
	if pm.tpm != nil && pm.tokens < was.tokens {
		s.tpm.refund(now, pm.tpm, pm.tokens)
		pm.tpm.taken = pm.tokens
	}
	s.regrant = true
}

// protectedSlots is how many of the concurrency limit URGENT and HIGH work
// may always have.
func (s *backendState) protectedSlots() int {
	return int(float64(s.limitNow()) * s.lim.protectedShare)
}

// limitNow is the concurrency limit now: the adaptive limit, within the
// slots the fleet leaves this replica.
func (s *backendState) limitNow() int {
	if s.fleetSlots > 0 && s.fleetSlots < s.limit {
		return s.fleetSlots
	}
	return s.limit
}

func (s *backendState) rank(w *waiter, now time.Time) time.Duration {
	return time.Duration(w.p.level())*s.aging - now.Sub(w.since)
}

func (s *backendState) protectedWaitingOwned() bool {
	for i := range s.waiters {
		if !s.waiters[i].p.background() {
			return true
		}
	}
	return false
}

// check reports whether every budget allows w now. Otherwise it says
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
func (s *backendState) check(w waiter, now time.Time, protectedWaiting bool) (ok bool, wait time.Duration, by string, shareOnly bool) {
	hold := w.p.background() && (protectedWaiting || s.lim.strict)
	limit := s.limitNow()
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
		share = s.lim.protectedShare
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

// grantOwned is the one grant function: it hands permits to waiters, best
// rank first, while the budgets allow, into s.out for delivery. A waiter
// held back only by the protected share does not block more urgent work
// behind it; any other shortage stops the round (the rate timer is armed
// for it).
func (s *backendState) grantOwned(now time.Time) {
	if len(s.waiters) == 0 {
		return
	}
	ws := s.waiters
	// Sort by rank; the list is short (one entry per waiting lane).
	for i := 1; i < len(ws); i++ {
		for j := i; j > 0 && s.rank(&ws[j], now) < s.rank(&ws[j-1], now); j-- {
			ws[j], ws[j-1] = ws[j-1], ws[j]
		}
	}
	protectedWaiting := s.protectedWaitingOwned()
	for i := 0; i < len(s.waiters); {
		w := s.waiters[i]
		ok, wait, by, shareOnly := s.check(w, now, protectedWaiting)
		if ok {
			pm, err := s.take(w, now)
			if err != nil { // half-open with its probes out, or just opened
				if s.open() {
					s.tellWaiters() // just opened: every waiter must hear it now, to fail over
				}
				return // a probe's end calls again
			}
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			s.out = append(s.out, grant{w.l, pm})
			if !w.p.background() {
				protectedWaiting = s.protectedWaitingOwned()
			}
			continue
		}
		if shareOnly {
			i++
			continue // only the protected share is left: look for urgent work
		}
		if by != budgetConcurrency {
			s.armOwned(now, wait)
		}
		break
	}
}

// tellWaiters ends every lane's wait with a grant of nothing, so that each
// looks at the backend again (its breaker opened, or the fleet holds it
// open) and fails over.
func (s *backendState) tellWaiters() {
	for _, w := range s.waiters {
		s.out = append(s.out, grant{l: w.l})
	}
	clear(s.waiters)
	s.waiters = s.waiters[:0]
}

// take books a permit for w: a slot, the breaker's leave and the
// reservations. The caller has checked that the budgets allow it.
func (s *backendState) take(w waiter, now time.Time) (*permit, error) {
	done, err := s.brk.Allow()
	if err != nil {
		return nil, err
	}
	pm := &permit{cost: w.cost, done: done, protected: !w.p.background()}
	if w.p.background() && s.inFlight >= s.limitNow()-s.protectedSlots() {
		pm.borrowed = true
		s.borrowed++
	}
	s.inFlight++
	pm.rpm = s.rpm.take(now, w.cost.requests)
	pm.tpm = s.tpm.take(now, w.cost.tokens)
	pm.spentAt = [2]uint64{s.rpm.spent, s.tpm.spent}
	if s.shared != nil {
		pm.fleet = &Demand{RPM: s.rpm.rate(), TPM: s.tpm.rate(), MaxConcurrency: s.lim.maxConc}
	}
	return pm, nil
}

// armOwned makes the owner run the grant function again after wait.
func (s *backendState) armOwned(now time.Time, wait time.Duration) {
	if wait <= 0 {
		return
	}
	at := now.Add(wait)
	if !s.timerAt.IsZero() && !s.timerAt.After(at) && s.timerAt.After(now) {
		return // an earlier look is set already
	}
	s.timerAt = at
	s.timer.Reset(wait)
}

// deliver hands out the round's permits, each as a message to its lane. A
// lane that closed refuses it: the permit comes straight back, so that
// none is stranded, and the grant function runs again.
func (s *backendState) deliver(now time.Time) {
	for i := 0; i < len(s.out); i++ {
		g := s.out[i]
		s.out[i] = grant{}
		g.l.grantsSent++
		if !g.l.grant(g.p) && g.p != nil {
			if g.p.done != nil {
				g.p.done(errUnused)
			}
			s.releaseOwned(g.p, cost{}, now)
			s.regrant = false
			s.grantOwned(now) // appends to s.out, which this loop reaches
		}
	}
	s.out = s.out[:0]
}
