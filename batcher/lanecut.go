package batcher

import (
	"math"
	"time"
)

// trim drops tombstones from the head of each flow, and the flows that
// are left empty (all but one per level).
func (l *lane) trim() {
	for p := range l.queues {
		lv := &l.queues[p]
		for i := 0; i < len(lv.flows); {
			f := lv.flows[i]
			for f.q.len() > 0 && f.q.peek() == nil {
				f.q.pop()
			}
			if f.q.len() == 0 && len(lv.flows) > 1 {
				lv.remove(l, i)
				continue
			}
			i++
		}
		if len(lv.flows) == 1 && lv.flows[0].q.len() == 0 {
			lv.vtime, lv.flows[0].finish = 0, 0 // nothing queued: start afresh
		}
	}
}

// rank orders calls for dispatch: lower goes first. A call climbs one
// priority for every aging step it has waited; flushed calls go first.
func (l *lane) rank(c *Call, q int, now mono) time.Duration {
	if q == qFlushed {
		return math.MinInt64
	}
	return time.Duration(q-1)*l.b.cfg.agingStep - time.Duration(now-c.admitted)
}

// before reports whether a goes before b at the same level: the smaller
// virtual finish time, then the earlier admission.
func before(a, b *Call) bool {
	return a.tag < b.tag || (a.tag == b.tag && a.admitted < b.admitted)
}

// best trims the flows and returns the queued call that goes first and its
// priority. The lane must hold at least one call.
func (l *lane) best(now time.Time) (*Call, Priority) {
	l.trim()
	var best *Call
	var bestRank time.Duration
	nowM := l.b.clock.monoOf(now)
	for q := range l.queues {
		c := l.queues[q].head()
		if c == nil {
			continue
		}
		if r := l.rank(c, q, nowM); best == nil || r < bestRank || (r == bestRank && c.admitted < best.admitted) {
			best, bestRank = c, r
		}
	}
	return best, best.prio
}

// earliestDue returns when the lane must send, from the queued calls'
// priority delays. A level's calls share a delay, so in each flow the
// first live call is due first, but for late ones: calls queued behind
// calls admitted after them (back from a retry or a fallback), which
// lateDue covers while any is queued. It may be earlier than the late
// calls still queued (it is kept, not recomputed, as they leave): the
// lane then sends sooner than it must, never later. With no such call
// (only flushed calls queued) ok is false: the lane must send now.
func (l *lane) earliestDue() (due mono, ok bool) {
	if l.lates > 0 {
		due, ok = l.lateDue, true
	}
	for q := 1; q < numQueues; q++ {
		for _, f := range l.queues[q].flows {
			c := f.q.first()
			if c == nil {
				continue
			}
			if d := c.due(); !ok || d < due {
				due, ok = d, true
			}
		}
	}
	return due, ok
}

// dueBy reports whether the lane must send by now (earliestDue).
func (l *lane) dueBy(now mono) bool {
	due, ok := l.earliestDue()
	return !ok || due <= now
}

// order visits queued calls best first, while visit says yes: across
// levels best rank first, inside a level by weighted fair queuing (the
// smallest virtual finish time first). It leaves in each flow's passed how
// many entries it passed (tombstones included), so that a cut can pop
// exactly those.
func (l *lane) order(now time.Time, visit func(c *Call) bool) {
	nowM := l.b.clock.monoOf(now)
	var only *flow // the one flow with entries, when only one has any
	many := false
	for q := range l.queues {
		for _, f := range l.queues[q].flows {
			f.passed = 0
			if f.q.len() > 0 && (!l.onlyFlushed || q == qFlushed) {
				many = many || only != nil
				only = f
			}
		}
	}
	if !many {
		// One priority and no tenants, the common lane: its fifo's order
		// is the order, with no rank to compare.
		if only != nil {
			only.walk(visit)
		}
		return
	}
	for {
		var best *Call
		var bestF *flow
		var bestRank time.Duration
		for q := range l.queues {
			if l.onlyFlushed && q != qFlushed {
				break
			}
			var head *Call
			var headF *flow
			for _, f := range l.queues[q].flows {
				for f.passed < f.q.len() && f.q.at(f.passed) == nil {
					f.passed++ // a tombstone: skip
				}
				if f.passed == f.q.len() {
					continue
				}
				if c := f.q.at(f.passed); head == nil || before(c, head) {
					head, headF = c, f
				}
			}
			if head == nil {
				continue
			}
			if r := l.rank(head, q, nowM); best == nil || r < bestRank || (r == bestRank && head.admitted < best.admitted) {
				best, bestF, bestRank = head, headF, r
			}
		}
		if best == nil || !visit(best) {
			return
		}
		bestF.passed++
	}
}

// walk is order for a lane whose entries are all in f.
func (f *flow) walk(visit func(c *Call) bool) {
	for ; f.passed < f.q.len(); f.passed++ {
		if c := f.q.at(f.passed); c != nil && !visit(c) {
			return
		}
	}
}

// plan returns what the lane's next batch may cost, for the backend's
// budgets. Only a backend with rate budgets needs the exact figure, which
// takes a walk of the queue; others get a bound.
func (l *lane) plan(now time.Time) cost {
	bc := l.bc
	if !l.be.limitedA.Load() {
		return cost{requests: l.be.calls(l.route.Name, l.route.Op, min(len(l.heap), bc.MaxBatchSize)), tokens: l.tokens}
	}
	var got cost
	n := 0
	l.order(now, func(c *Call) bool {
		if !l.fits(n, got, c, cost{requests: math.MaxInt, tokens: math.MaxInt}) {
			return false
		}
		n++
		got = cost{requests: l.be.calls(l.route.Name, l.route.Op, n), tokens: got.tokens + c.tokens}
		return true
	})
	return got
}

// fits reports whether c may join a batch of n calls costing got.
func (l *lane) fits(n int, got cost, c *Call, caps cost) bool {
	if n == 0 {
		return true
	}
	bc := l.bc
	return n < bc.MaxBatchSize &&
		(bc.MaxBatchTokens == 0 || got.tokens+c.tokens <= bc.MaxBatchTokens) &&
		got.tokens+c.tokens <= caps.tokens &&
		l.be.calls(l.route.Name, l.route.Op, n+1) <= caps.requests
}

// cut takes the next batch off the queue within the held permit, settles
// the permit to it and hands both to the backend's workers.
func (l *lane) cut(now time.Time) {
	pm := l.pm
	l.pm = nil
	caps := cost{requests: math.MaxInt, tokens: math.MaxInt}
	if pm.rpm != nil {
		caps.requests = pm.requests
	}
	if pm.tpm != nil {
		caps.tokens = pm.tokens
	}
	r := l.newRun(pm, now)
	var got cost
	l.order(now, func(c *Call) bool {
		if !l.fits(len(r.calls), got, c, caps) {
			return false
		}
		r.calls = append(r.calls, c)
		got = cost{requests: l.be.calls(l.route.Name, l.route.Op, len(r.calls)), tokens: got.tokens + c.tokens}
		return true
	})
	for q := range l.queues {
		for _, f := range l.queues[q].flows {
			for range f.passed {
				f.q.pop()
			}
		}
	}
	l.heap.removeAll(r.calls)
	var by [numPriorities]int32
	for _, c := range r.calls {
		if lv := &l.queues[c.qidx]; c.tag > lv.vtime {
			lv.vtime = c.tag // the level's virtual time: the last finish served
		}
		by[c.prio]++
		l.unqueue(c, r)
	}
	l.size.Add(-int32(len(r.calls)))
	for p, k := range by {
		if k > 0 {
			l.queuedBy[p].Add(-k)
		}
	}
	l.be.settle(pm, got)
	if r.partial = len(r.calls) < l.bc.MaxBatchSize; r.partial {
		l.partials.Add(1)
	}
	l.inFlight.Add(int32(len(r.calls)))
	l.b.track(r)
	l.be.work <- r // never blocks: there is room for every permit out
}
