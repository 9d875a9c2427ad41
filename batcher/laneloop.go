package batcher

import (
	"cmp"
	"errors"
	"runtime"
	"slices"
	"time"
)

// loop is the owner goroutine.
func (l *lane) loop() {
	defer l.b.lanesWG.Done()
	defer l.timer.Stop()
	l.idleAt = time.Now()
	for {
		select {
		case <-l.trigger:
			l.nudged.Store(false)
		case <-l.timer.C:
		}
		for {
			l.sleepUntil.Store(0) // awake: every push nudges
			if l.step() {
				return
			}
			if l.wake.IsZero() {
				break
			}
			// Asleep until wake: pushes that can wait for it stop nudging.
			// A push that came in before the store saw 0 and nudged; one
			// after it sees wake. One in between is caught here.
			l.sleepUntil.Store(max(int64(l.b.clock.monoOf(l.wake)), 1)) // 0 means awake
			l.inMu.Lock()
			more := l.inboxFull()
			l.inMu.Unlock()
			if !more {
				break
			}
		}
	}
}

// step reads the inbox, expires, cuts and dispatches what is due, and arms
// the timer. It reports whether the lane is done for good.
func (l *lane) step() (exit bool) {
	now := l.b.clock.now()
	l.drain()
	closing := l.b.closing.Load()
	l.expire(now)
	waiting := l.sendDue(now, closing)
	if len(l.heap) == 0 {
		// Calls that left other than in a cut left tombstones, and
		// with no live call queued nothing would trim them.
		l.trim()
		if l.asked {
			l.be.drop(l) // nothing left to wait for
			l.asked = false
		}
	}
	var next time.Time
	if len(l.heap) > 0 {
		next = l.b.clock.time(l.heap[0].deadline)
		if !waiting {
			if due, ok := l.earliestDue(); !ok {
				next = time.Time{} // only flushed calls: due now
			} else if due < l.heap[0].deadline {
				next = l.b.clock.time(due)
			}
		}
	}
	idle := len(l.heap) == 0
	l.settle(now)

	l.wake = time.Time{}
	if !idle {
		l.idleAt = time.Time{}
		l.idleSince.Store(0)
		l.timer.Reset(next.Sub(now))
		if !waiting {
			l.wake = next
		}
		return false
	}
	return l.rest(now, closing)
}

// expire ends the queued calls whose deadline has passed, and all of them
// once shutdown's deadline has passed.
func (l *lane) expire(now time.Time) {
	if l.b.aborted.Load() { // shutdown's deadline passed: end whatever came in since
		for len(l.heap) > 0 {
			l.end(l.heap[0], ErrShutdown)
		}
	}
	nowM := l.b.clock.monoOf(now)
	for len(l.heap) > 0 && l.heap[0].deadline <= nowM {
		l.end(l.heap[0], ErrDeadline)
	}
}

// sendDue cuts batches while one is due and a permit is held or granted.
// It reports whether the lane waits for a grant.
func (l *lane) sendDue(now time.Time, closing bool) (waiting bool) {
	bc := l.bc
	yielded := false
	nowM := l.b.clock.monoOf(now)
	for len(l.heap) > 0 {
		head, headP := l.best(now)
		send := closing ||
			len(l.heap) >= bc.MaxBatchSize ||
			(bc.MaxBatchTokens > 0 && l.tokens >= bc.MaxBatchTokens) ||
			l.dueBy(nowM)
		// A flush alone sends only the flushed calls: the others keep
		// waiting for their own triggers, so that one caller's flushes do
		// not cut other callers' batches short.
		l.onlyFlushed = false
		if fh := l.queues[qFlushed].head(); !send && fh != nil {
			send, l.onlyFlushed = true, true
			head = fh
			headP = head.prio
		}
		if !send && l.pm != nil {
			send = true // a permit came (asked for by an earlier step): use it
		}
		if !send && len(l.heap) >= bc.MinBatchSize && l.partials.Load() == 0 {
			// An early send. Yield once first, so that producers already
			// runnable (woken by the last batch's results) join this batch
			// rather than the next: in a quiet system nobody is, and the
			// batch leaves at once.
			if !yielded && len(l.heap) < bc.MaxBatchSize {
				yielded = true
				runtime.Gosched()
				l.drain()
				continue
			}
			send = true
		}
		if !send {
			return false
		}
		if l.pm == nil {
			if l.acquire(now, head, headP) {
				continue // granted, or refused: look again
			}
			return true
		}
		l.cut(now)
	}
	return false
}

// acquire asks the backend's owner for a permit for a batch headed by
// head; the owner answers with a grant, or with a refusal (handle). It
// reports true when the answer came at once (a permit, or
// a refusal that moved the queued calls on), so that the lane looks again,
// and false while the lane waits for it.
func (l *lane) acquire(now time.Time, head *Call, headP Priority) (again bool) {
	w := waiter{l: l, p: headP, since: l.b.clock.time(head.admitted), cost: l.plan(now), seen: l.grantsSeen}
	if l.asked && w == l.askedAs {
		return false // asked already; the answer comes as a message
	}
	l.asked, l.askedAs = true, w
	l.be.ask(w)
	// An uncontended ask is answered at once (backendState.send): the
	// grant, or the refusal, is in the inbox already, and the batch
	// leaves in this step.
	l.drain()
	return l.pm != nil || !l.asked
}

// settle ends the calls the step took out to end, and queues anew those
// it moved to another target.
func (l *lane) settle(now time.Time) {
	for i, e := range l.ended {
		e.c.finish(Result{Err: e.err}, now)
		l.ended[i] = ending{}
	}
	l.ended = l.ended[:0]
	for i, c := range l.moved {
		l.b.enqueue(c)
		l.moved[i] = nil
	}
	l.moved = l.moved[:0]
}

// rest is the step's end for a lane with nothing queued: it gives back a
// held permit, and closes the lane once it has been idle long enough (or
// at shutdown), else arms the timer for that. It reports whether the lane
// is done for good.
func (l *lane) rest(now time.Time, closing bool) (exit bool) {
	b := l.b
	if l.pm != nil {
		l.be.giveBack(l.pm)
		l.pm = nil
	}
	if l.idleAt.IsZero() {
		l.idleAt = now
	}
	if l.idleSince.Load() == 0 {
		l.idleSince.Store(l.idleAt.UnixNano())
	}
	if l.evicted.Load() {
		l.be.drop(l)
		l.asked = false
		return true // closed and out of b.lanes already
	}
	if closing || !now.Before(l.idleAt.Add(b.cfg.idleLane)) {
		if l.close() {
			return true
		}
	}
	l.timer.Reset(l.idleAt.Add(b.cfg.idleLane).Sub(now))
	return false
}

// inboxFull reports whether the inbox holds a message. Called with inMu
// held.
func (l *lane) inboxFull() bool { return len(l.inbox) > 0 || len(l.pushes) > 0 }

// drain takes the inbox and applies its messages, in the order they were
// sent: each other message after the pushes sent before it.
func (l *lane) drain() {
	l.inMu.Lock()
	in, pushes := l.inbox, l.pushes
	l.inbox, l.pushes = l.spare[:0], l.sparePushes[:0]
	l.inMu.Unlock()
	done := 0
	for i := range in {
		for ; done < int(in[i].pushes); done++ {
			l.queue(pushes[done])
		}
		l.handle(&in[i])
		in[i] = msg{}
	}
	for ; done < len(pushes); done++ {
		l.queue(pushes[done])
	}
	clear(pushes)
	l.spare, l.sparePushes = in, pushes
}

// queue applies a push of c.
func (l *lane) queue(c *Call) {
	if !c.pending() { // ended before the owner saw it
		c.queued.Store(false)
		l.queuedBy[c.prio].Add(-1)
		l.size.Add(-1)
		return
	}
	p := c.prio
	c.qidx = uint8(p.level() + 1)
	if ahead := l.queues[c.qidx].push(l, c); ahead != nil && c.admitted < ahead.admitted {
		// Back from a retry or a fallback: due before calls queued
		// ahead of it, where earliestDue does not look.
		c.late = true
		if due := c.due(); l.lates == 0 || due < l.lateDue {
			l.lateDue = due
		}
		l.lates++
	}
	l.heap.push(c)
	l.tokens += c.tokens
}

// handle applies one inbox message other than a push.
func (l *lane) handle(m *msg) {
	switch m.kind {
	case msgForget:
		if c := m.c; l.holds(c) {
			l.heap.remove(c.heapIdx)
			l.dequeued(c, nil)
		}
	case msgGrant:
		// The backend dropped the wait it granted; a nil permit says that
		// its breaker opened: asking again fails over.
		l.asked = false
		l.grantsSeen++
		switch {
		case m.pm == nil:
		case l.pm != nil || len(l.heap) == 0:
			l.be.giveBack(m.pm) // a second permit, or nothing to send
		default:
			l.pm = m.pm
		}
	case msgRefused:
		l.refused(m.err, time.Now())
	case msgFlush:
		fw := m.fw
		var calls []*Call
		if fw.calls == nil {
			calls = slices.Clone(l.heap)
		} else {
			for _, c := range fw.calls {
				if l.holds(c) && c.pending() {
					calls = append(calls, c)
				}
			}
		}
		// In admission order, so that a flushed batch keeps it.
		slices.SortFunc(calls, func(a, b *Call) int { return cmp.Compare(a.admitted, b.admitted) })
		for _, c := range calls {
			l.markFlushed(c, fw)
		}
		fw.sent() // the count started at one: this message's own
	}
}

// refused applies the backend's refusal of the lane's ask. An open breaker
// moves every queued call to the route's next target, or fails it. A rate
// budget's wait moves (or fails) only the calls it would take past their
// deadlines; the lane keeps waiting for its grant.
func (l *lane) refused(err error, now time.Time) {
	var be *BudgetError
	if !errors.As(err, &be) {
		l.asked = false
		l.failover(func(*Call) bool { return true }, err)
		return
	}
	limit := l.b.clock.monoOf(now.Add(be.Wait))
	l.failover(func(c *Call) bool { return c.deadline < limit }, err)
}

// holds reports whether c is in l's heap. Only the owner of the lane that
// holds c writes c.heapIdx, so it may be read only once c is known to be
// l's, and c.lane alone does not tell: c may have been cut from l, failed
// over and pushed to another lane since the message about it was sent.
// queued is read first. push stores lane before queued, and l cleared
// queued when c left it (a cut, an end, a forget or a failover), so a
// queued that reads true comes from a later push: the lane read next is
// that push's or a later one's, and the writes of the lane c was in
// before (its heapIdx = -1) happened before it. TestFlushRacesFallback
// races there under the race detector when holds reads lane alone.
func (l *lane) holds(c *Call) bool {
	return c.queued.Load() && c.lane.Load() == l && c.heapIdx >= 0
}

// markFlushed moves a queued call to the flushed queue, ahead of everyone,
// and makes fw wait for it unless nobody waits on fw.
func (l *lane) markFlushed(c *Call, fw *flushWait) {
	if !fw.unwaited {
		if l.flushOf == nil {
			l.flushOf = make(map[*Call][]*flushWait)
		}
		l.flushOf[c] = append(l.flushOf[c], fw)
		fw.left.Add(1)
	}
	if c.qidx != qFlushed {
		l.queues[c.qidx].kill(c)
		c.qidx = qFlushed
		l.queues[qFlushed].push(l, c)
	}
}

// dequeued books c's leaving the heap other than in a cut: its fifo entry
// becomes a tombstone, skipped and dropped later. A flush waiting on c is
// told now, or, when c leaves in run r, once r's upstream call starts.
func (l *lane) dequeued(c *Call, r *batchRun) {
	l.queues[c.qidx].kill(c)
	l.size.Add(-1)
	l.queuedBy[c.prio].Add(-1)
	l.unqueue(c, r)
}

// unqueue is dequeued but for the shared counters (size and queuedBy),
// which a cut books once for the whole batch.
func (l *lane) unqueue(c *Call, r *batchRun) {
	c.heapIdx = -1
	if c.late {
		c.late = false
		l.lates--
	}
	c.queued.Store(false)
	l.tokens -= c.tokens
	if l.flushOf != nil {
		if ws, ok := l.flushOf[c]; ok {
			for _, fw := range ws {
				if r != nil {
					r.flushes = append(r.flushes, fw)
				} else {
					fw.sent()
				}
			}
			delete(l.flushOf, c)
			if len(l.flushOf) == 0 {
				l.flushOf = nil
			}
		}
	}
}

// end takes a queued call out to end with err after the step.
func (l *lane) end(c *Call, err error) {
	l.heap.remove(c.heapIdx)
	l.dequeued(c, nil)
	l.ended = append(l.ended, ending{c, err})
}

// close ends the lane when nothing arrived in the meantime: from then on
// producers look the lane up again and grants go straight back. It reports
// false when the lane got work.
func (l *lane) close() bool {
	b := l.b
	b.lanesMu.Lock()
	l.inMu.Lock()
	if l.inboxFull() {
		l.inMu.Unlock()
		b.lanesMu.Unlock()
		return false
	}
	l.closed = true
	if b.lanes[l.key] == l {
		delete(b.lanes, l.key)
		b.laneHolders.remove(l)
	}
	l.inMu.Unlock()
	b.lanesMu.Unlock()
	l.be.drop(l) // a stale wait, if any: its grant would come straight back
	l.asked = false
	return true
}

// failover takes the queued calls that match out of the lane: each moves
// to the route's next target, or, on the last one, ends with err.
func (l *lane) failover(match func(*Call) bool, err error) {
	last := int(l.key.target)+1 >= len(l.route.targets)
	for _, c := range slices.Clone(l.heap) {
		if !match(c) {
			continue
		}
		if last {
			if errors.Is(err, ErrBudgetExhausted) {
				l.be.stats.budgetFails.Add(1)
				l.be.log.budgetFailed(c, l.route.Name, err)
			}
			l.end(c, err)
			continue
		}
		l.heap.remove(c.heapIdx)
		l.dequeued(c, nil)
		l.be.stats.fallbacks.Add(1)
		l.be.log.fellBack(c, l.route.Name, l.key.target+1, err)
		c.target = l.key.target + 1
		l.moved = append(l.moved, c)
	}
}
