package batcher

import "time"

// bmsgKind is the kind of a message to a backend's owner.
type bmsgKind uint8

const (
	bmAsk      bmsgKind = iota // w's lane asks for a permit
	bmDrop                     // w's lane waits no longer
	bmSettle                   // pm shrank to the batch cut from used (ask's cost)
	bmRelease                  // pm ends: its batch spent used, and taught lesson and info
	bmRetry                    // c waits out a backoff until at
	bmFollow                   // the fleet booked pm's batch: what it has left (fleet, slots)
	bmShare                    // the fleet's share of every budget (share)
	bmPause                    // another replica was told to wait until at
	bmHoldOpen                 // the fleet holds the backend open: waiters look again
	bmLimits                   // Reconfigure changed the limits to bc's; answered on done
	bmAbort                    // Shutdown's drain ended: calls waiting out a backoff end; answered on done
	bmQuery                    // run fn with the owner's state (Stats); answered on done
)

// bmsg is a message to a backend's owner. Which fields a kind uses is
// written beside the kind.
type bmsg struct {
	kind   bmsgKind
	lesson lesson
	w      waiter
	pm     *permit
	used   cost
	info   *RateLimitInfo
	c      *Call
	at     time.Time
	fleet  [2]float64 // requests and tokens the fleet's buckets had left
	slots  int
	share  float64
	bc     *BackendConfig
	fn     func()
	done   chan struct{}
}

// ownerState is where a backend's owner goroutine is in its life.
type ownerState uint8

const (
	ownerNone     ownerState = iota // not started: senders apply their messages themselves
	ownerRunning                    // the owner applies every message
	ownerStopping                   // Shutdown asked it to exit once its inbox is empty
	ownerStopped                    // exited: senders apply their messages themselves
)

// send hands m to the owner: appended to the inbox, and the owner nudged.
// While no owner goroutine runs, the sender applies m itself, holding inMu.
// A lane's ask that finds the owner idle (nobody holds the turn) is
// applied by the lane itself, with the rest of the inbox, as the owner
// would (runTurn): an uncontended ask then costs no goroutine switch, and the
// lane finds its grant in its own inbox at once.
func (s *backendState) send(m bmsg) {
	s.inMu.Lock()
	if s.owner == ownerNone || s.owner == ownerStopped {
		now := time.Now()
		if m.kind == bmRetry { // after Shutdown: no owner will requeue it
			m.c.finish(Result{Err: ErrShutdown}, now)
		} else {
			s.apply(&m, now)
		}
		s.round(now)
		s.inMu.Unlock()
		return
	}
	s.inbox = append(s.inbox, m)
	if m.kind == bmAsk && !s.turn {
		in, rate, retry := s.beginTurnLocked()
		s.inMu.Unlock()
		s.runTurn(in, rate, retry)
		return
	}
	// A release or a settle matters only to lanes that wait: while none
	// does, it waits in the inbox for the next message that wakes the
	// owner (an ask, first of all), which it precedes.
	wake := s.waitersIn || (m.kind != bmRelease && m.kind != bmSettle)
	s.inMu.Unlock()
	if wake {
		s.nudge()
	}
}

// beginTurnLocked takes the owner's turn, the inbox and the timers that
// fired meanwhile.
func (s *backendState) beginTurnLocked() (in []bmsg, rate, retry bool) {
	s.turn = true
	in = s.inbox
	s.inbox = s.spare[:0]
	rate, retry = s.rateFired, s.retryFired
	s.rateFired, s.retryFired = false, false
	return in, rate, retry
}

// nudge wakes the owner without blocking.
func (s *backendState) nudge() {
	if s.nudged.Load() || !s.nudged.CompareAndSwap(false, true) {
		return
	}
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// ensureOwner starts the backend's owner and its dispatch workers, once:
// the Batcher calls it as it makes one of the backend's lanes (laneFor),
// which is the first anyone can ask for a permit. It is not the owner that
// starts them, nor a lane's.
func (s *backendState) ensureOwner() {
	s.inMu.Lock()
	if s.owner != ownerNone {
		s.inMu.Unlock()
		return
	}
	s.owner = ownerRunning
	n := s.wantWorkers
	s.workersN = n
	b := s.b
	b.owners.Add(1)
	b.workers.Add(n)
	s.inMu.Unlock()
	go s.loop()
	for range n {
		go s.worker(&b.workers)
	}
}

// stop asks the owner to exit once it has applied every message sent
// before. Shutdown calls it after the dispatch workers have returned.
func (s *backendState) stop() {
	s.inMu.Lock()
	switch s.owner {
	case ownerNone:
		s.owner = ownerStopped
	case ownerRunning:
		s.owner = ownerStopping
	}
	s.inMu.Unlock()
	s.nudge()
}

// query runs fn with the owner's state, after every message sent before,
// and returns once it has run.
func (s *backendState) query(fn func()) {
	done := make(chan struct{})
	s.send(bmsg{kind: bmQuery, fn: fn, done: done})
	<-done
}

// loop is the owner goroutine.
func (s *backendState) loop() {
	defer s.b.owners.Done()
	defer s.timer.Stop()
	defer s.retrying.timer.Stop()
	for {
		rate, retry := false, false
		select {
		case <-s.trigger:
			s.nudged.Store(false)
		case <-s.timer.C:
			rate = true
		case <-s.retrying.timer.C:
			retry = true
		}
		if s.step(rate, retry) {
			return
		}
	}
}

// step takes the owner's turn and works through the inbox and the timers
// that fired (rate, retry). While a lane holds the turn, the timers are
// left to it. It reports whether the owner is done for good.
func (s *backendState) step(rate, retry bool) (exit bool) {
	s.inMu.Lock()
	s.rateFired, s.retryFired = s.rateFired || rate, s.retryFired || retry
	if s.turn {
		s.inMu.Unlock()
		return false // the holder looks at the inbox and the timers before it lets go
	}
	stopping := s.owner == ownerStopping
	if stopping && len(s.inbox) == 0 && !s.rateFired && !s.retryFired {
		s.owner = ownerStopped
		s.inMu.Unlock()
		return true
	}
	in, rate, retry := s.beginTurnLocked()
	s.inMu.Unlock()
	s.runTurn(in, rate, retry)
	if stopping {
		s.nudge() // look again: exit once nothing more came in
	}
	return false
}

// runTurn is the owner's turn: it applies the messages in, runs the grant
// function once and delivers its permits, then lets go of the turn. The
// caller holds the turn: the owner goroutine, or a lane whose ask found it
// free (send).
func (s *backendState) runTurn(in []bmsg, rate, retry bool) {
	now := time.Now()
	if rate {
		s.timerAt = time.Time{}
		s.regrant = true
	}
	if retry {
		s.retrying.at = time.Time{}
		s.requeueDue(now)
	}
	for i := range in {
		s.apply(&in[i], now)
		in[i] = bmsg{}
	}
	s.spare = in
	s.round(now)
	s.inMu.Lock()
	s.turn = false
	s.waitersIn = len(s.waiters) > 0
	again := len(s.inbox) > 0 || s.rateFired || s.retryFired
	s.inMu.Unlock()
	if again {
		s.nudge() // what came in meanwhile is the owner goroutine's
	}
}

// apply applies one message.
func (s *backendState) apply(m *bmsg, now time.Time) {
	switch m.kind {
	case bmAsk:
		s.askOwned(m.w)
	case bmDrop:
		s.dropOwned(m.w.l)
	case bmSettle:
		s.settleOwned(m.pm, m.used, now)
	case bmRelease:
		s.learnOwned(m.pm, m.lesson, m.info, now)
		s.releaseOwned(m.pm, m.used, now)
	case bmRetry:
		s.retryOwned(m.c, m.at, now)
	case bmFollow:
		s.followOwned(m, now)
	case bmShare:
		s.shareOwned(m.share, now)
	case bmPause:
		if m.at.After(s.pausedUntil) {
			s.pauseOwned(now, m.at)
			s.log.paused(m.at.Sub(now), "another replica was told to wait (429 with Retry-After)")
		}
	case bmHoldOpen:
		s.tellWaiters()
	case bmLimits:
		s.limitsOwned(m.bc, now)
		s.replies = append(s.replies, *m)
	case bmAbort:
		s.abortRetries(now)
		s.replies = append(s.replies, *m)
	case bmQuery:
		s.replies = append(s.replies, *m)
	}
}

// round ends a step: the grant function runs once for everything the
// step's messages changed, its permits go out, the lanes that asked and
// must wait are told how long, and queries are answered.
func (s *backendState) round(now time.Time) {
	if s.regrant {
		s.regrant = false
		s.grantOwned(now)
	}
	s.deliver(now)
	if len(s.asked) > 0 {
		s.answerAsks(now)
	}
	for i, m := range s.replies {
		s.replies[i] = bmsg{}
		if m.fn != nil {
			m.fn()
		}
		close(m.done)
	}
	s.replies = s.replies[:0]
}

// limitsOwned changes the limits to bc's in place (Reconfigure), and
// restarts the adaptive concurrency from the new figures.
func (s *backendState) limitsOwned(bc *BackendConfig, now time.Time) {
	old := s.lim
	s.lim = limitsOf(bc)
	if old.maxConc != bc.MaxConcurrency || old.minConc != bc.MinConcurrency {
		s.limit = bc.MaxConcurrency
		s.successes = 0
		if s.share < 1 {
			s.fleetSlots = shareOf(bc.MaxConcurrency, s.share)
		}
	}
	s.rpm.reconfigure(now, bc.RPM, bc.RPMBurst, bc.rpmBurstSet)
	s.tpm.reconfigure(now, bc.TPM, bc.TPMBurst, bc.tpmBurstSet)
	s.limitedA.Store(s.rpm.lim != nil || s.tpm.lim != nil)
	s.regrant = true
}

// limitsView is what Stats shows of a backend's limits now.
type limitsView struct {
	inFlight, limit, borrowed int
	rpm, tpm                  float64
	rpmBurst, tpmBurst        int
}

// view returns the backend's limits as its owner holds them, after every
// message sent before.
func (s *backendState) view() limitsView {
	var v limitsView
	s.query(func() {
		v = limitsView{inFlight: s.inFlight, limit: s.limitNow(), borrowed: s.borrowed,
			rpm: s.rpm.perMinuteRate(), tpm: s.tpm.perMinuteRate()}
		if s.rpm.lim != nil {
			v.rpmBurst = s.rpm.lim.Burst()
		}
		if s.tpm.lim != nil {
			v.tpmBurst = s.tpm.lim.Burst()
		}
	})
	return v
}
