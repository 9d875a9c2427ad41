package batcher

// level is one urgency level of a lane's queue: one flow (fifo) per
// tenant with calls queued there, served by weighted fair queuing
// (self-clocked: a call's virtual finish time is its flow's last one, or
// the level's virtual time if later, plus its estimated tokens over its
// tenant's weight; the smallest goes first, and the level's virtual time
// is the finish time of the last call cut). Without tenants a level holds
// one flow, a plain fifo. Flushed calls form a level of their own, fair
// between tenants in the same way, so that a tenant's flushes (every
// stream flushes its requests when it half-closes) do not put its flood
// ahead of the others.
//
// Flows are per tenant rather than shuffle-sharded (Kubernetes APF): the
// tenants are configured, so their number is bounded and small, and a
// flow of one's own isolates exactly, where shuffle sharding isolates with
// a probability. Owner-only.
type level struct {
	flows []*flow
	vtime float64
}

// flow is one tenant's fifo at one level.
type flow struct {
	t      *tenantState // the flow's tenant; nil: none
	q      fifo
	finish float64 // the virtual finish time of its last call queued
	passed int     // order's scratch: entries passed
}

// flowFor returns t's flow, making it if needed. A level whose one flow
// is empty gives it to t.
func (lv *level) flowFor(l *lane, t *tenantState) *flow {
	for _, f := range lv.flows {
		if f.t == t {
			return f
		}
	}
	if len(lv.flows) == 1 && lv.flows[0].q.len() == 0 {
		f := lv.flows[0]
		f.t, f.finish = t, 0
		return f
	}
	var f *flow
	if n := len(l.spareFlows); n > 0 {
		f = l.spareFlows[n-1]
		l.spareFlows[n-1] = nil
		l.spareFlows = l.spareFlows[:n-1]
	} else {
		f = &flow{}
	}
	f.t = t
	lv.flows = append(lv.flows, f)
	return f
}

// head returns the level's first call, or nil; tombstones at the heads
// must have been trimmed.
func (lv *level) head() *Call {
	var c *Call
	for _, f := range lv.flows {
		if f.q.len() > 0 && (c == nil || before(f.q.peek(), c)) {
			c = f.q.peek()
		}
	}
	return c
}

// push queues c in its tenant's flow with its virtual finish time. It
// returns the first call queued ahead of c in that flow, or nil.
func (lv *level) push(l *lane, c *Call) (ahead *Call) {
	f := lv.flowFor(l, c.tenant)
	ahead = f.q.first()
	f.finish = max(f.finish, lv.vtime) + float64(c.tokens)/c.tenant.weight()
	c.tag = f.finish
	c.entry = f.q.push(c)
	return ahead
}

// kill turns c's entry, in its tenant's flow, into a tombstone: the one
// entry of a queued call, which leaves the lane's heap other than in a
// cut (a cut pops the entries it takes). A call leaves no entry behind
// that could come alive again when it is queued anew, here or in another
// lane, after a retry or a fallback.
func (lv *level) kill(c *Call) {
	for _, f := range lv.flows {
		if f.t == c.tenant {
			f.q.kill(c.entry, c)
			return
		}
	}
}

// remove drops the empty flow i, keeping it for reuse.
func (lv *level) remove(l *lane, i int) {
	f := lv.flows[i]
	last := len(lv.flows) - 1
	lv.flows[i] = lv.flows[last]
	lv.flows[last] = nil
	lv.flows = lv.flows[:last]
	*f = flow{q: fifo{items: f.q.items[:0]}}
	l.spareFlows = append(l.spareFlows, f)
}
