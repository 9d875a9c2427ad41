package batcher

import (
	"fmt"
	"time"
)

// The lane cap (WithMaxLanes) bounds the lanes open at once. A lane is a
// route with one set of batch-relevant parameters, so a caller that sends
// each request with its own seed or temperature opens a lane per request.
// Two rules keep such a caller from locking everyone else out:
//
//   - When a new lane would pass the cap, the idle lanes (nothing queued,
//     nothing in flight) are closed at once to make room, instead of
//     living out their idle timeout.
//   - A caller holds at most a fair share of the cap: the cap over the
//     tenants that hold lanes, and within a tenant, the tenant's share over
//     its connections that hold lanes (each counting the caller asking).
//     A lane counts against the caller that made it, until it closes.
//
// A refusal is a *LaneLimitError, whose RetryAfter is the time until the
// first lane that could make room is expected to act: the earliest wake-up
// among the lanes in question (a due batch or a deadline), at least
// minLaneRetry.

// minLaneRetry is the least RetryAfter a lane refusal gives.
const minLaneRetry = 10 * time.Millisecond

// LaneLimitError is the refusal of a request that needs a new lane: the
// cap is reached with no idle lane to close, or the caller holds its fair
// share. It wraps ErrTooManyLanes.
type LaneLimitError struct {
	Open, Limit int // lanes open and the cap
	// Share is the caller's fair share and Held what it holds, when the
	// share refused it; 0 when the cap did.
	Share, Held int
	// RetryAfter is when a lane is expected to make room.
	RetryAfter time.Duration
}

func (e *LaneLimitError) Error() string {
	const why = "requests that differ in max_tokens, temperature, top_p, seed or stop each need a lane of their own"
	if e.Share > 0 {
		return fmt.Sprintf("%v: this caller holds %d lanes, its fair share of the %d (max lanes) among the callers holding lanes; %s", ErrTooManyLanes, e.Held, e.Limit, why)
	}
	return fmt.Sprintf("%v: %d lanes open, the limit (max lanes), none idle; %s", ErrTooManyLanes, e.Open, why)
}

func (e *LaneLimitError) Unwrap() error { return ErrTooManyLanes }

// laneHolder is the caller a lane counts against.
type laneHolder struct{ tenant, conn string }

// laneHolders counts the open lanes by the tenant and connection that made
// them. Guarded by Batcher.lanesMu.
type laneHolders struct {
	tenants map[string]*tenantLanes
}

type tenantLanes struct {
	n     int
	conns map[string]int
}

// holderOf names req's caller.
func holderOf(req *Request) laneHolder {
	h := laneHolder{tenant: req.Tenant}
	if req.Conn != nil {
		h.conn = req.Conn.String()
	}
	return h
}

func (h *laneHolders) add(l *lane, caller laneHolder) {
	l.holder = caller
	if h.tenants == nil {
		h.tenants = map[string]*tenantLanes{}
	}
	t := h.tenants[l.holder.tenant]
	if t == nil {
		t = &tenantLanes{conns: map[string]int{}}
		h.tenants[l.holder.tenant] = t
	}
	t.n++
	t.conns[l.holder.conn]++
}

func (h *laneHolders) remove(l *lane) {
	t := h.tenants[l.holder.tenant]
	if t == nil {
		return
	}
	t.n--
	if t.conns[l.holder.conn]--; t.conns[l.holder.conn] <= 0 {
		delete(t.conns, l.holder.conn)
	}
	if t.n <= 0 {
		delete(h.tenants, l.holder.tenant)
	}
}

// share returns req's caller's fair share of max lanes and the lanes it
// holds: the tenant's share first, then the connection's within it.
func (h *laneHolders) share(caller laneHolder, max int) (share, held int) {
	t := h.tenants[caller.tenant]
	tenants := len(h.tenants)
	var tenantHeld, conns, connHeld int
	if t != nil {
		tenantHeld, conns, connHeld = t.n, len(t.conns), t.conns[caller.conn]
	} else {
		tenants++
	}
	if connHeld == 0 {
		conns++
	}
	tenantShare := max / tenants
	connShare := tenantShare / conns
	if tenantHeld >= tenantShare {
		return tenantShare, tenantHeld
	}
	return connShare, connHeld
}

// roomForLaneLocked reports whether req's caller may open a new lane; or
// why not, as a *LaneLimitError. A caller at its fair share first loses
// its own idle lanes, and at the cap every idle lane goes. Called with
// lanesMu held.
func (b *Batcher) roomForLaneLocked(caller laneHolder, now time.Time) error {
	limit := b.cfg.maxLanes
	mine := func(l *lane) bool { return l.holder.tenant == caller.tenant }
	overShare := func() (int, int, bool) {
		share, held := b.laneHolders.share(caller, limit)
		share = max(share, 1)
		return share, held, held >= share && share < limit // alone, a caller may fill the cap
	}
	share, held, over := overShare()
	if over && b.evictIdleLocked(mine) > 0 {
		share, held, over = overShare()
	}
	if over {
		return &LaneLimitError{Open: len(b.lanes), Limit: limit, Share: share, Held: held, RetryAfter: b.laneWaitLocked(now, mine)}
	}
	if len(b.lanes) < limit || b.evictIdleLocked(func(*lane) bool { return true }) > 0 {
		return nil
	}
	return &LaneLimitError{Open: len(b.lanes), Limit: limit, RetryAfter: b.laneWaitLocked(now, func(*lane) bool { return true })}
}

// evictIdleLocked closes every idle lane that matches (nothing queued,
// nothing in the inbox, nothing in flight) and returns how many it closed.
// Each owner exits at its next step; a sender that finds its lane closed
// looks the key up again. Called with lanesMu held.
func (b *Batcher) evictIdleLocked(match func(*lane) bool) int {
	n := 0
	for key, l := range b.lanes {
		if l.idleSince.Load() == 0 || l.inFlight.Load() != 0 || !match(l) {
			continue
		}
		l.inMu.Lock()
		if l.inboxFull() || l.size.Load() != 0 || l.closed {
			l.inMu.Unlock()
			continue
		}
		l.closed = true
		l.evicted.Store(true)
		l.inMu.Unlock()
		delete(b.lanes, key)
		b.laneHolders.remove(l)
		l.nudge()
		n++
	}
	return n
}

// laneWaitLocked estimates when one of the lanes that match will make
// room: the earliest time an owner of one wakes to dispatch or expire
// (sleepUntil), at least minLaneRetry; the idle timeout when none has a
// wake-up planned. Called with lanesMu held.
func (b *Batcher) laneWaitLocked(now time.Time, match func(*lane) bool) time.Duration {
	wait := b.cfg.idleLane
	for _, l := range b.lanes {
		if !match(l) {
			continue
		}
		if at := l.sleepUntil.Load(); at != 0 {
			wait = min(wait, time.Duration(at-now.UnixNano()))
		} else if l.size.Load() > 0 || l.inFlight.Load() > 0 {
			wait = min(wait, l.bc.MaxWait) // awake: a batch goes within its wait
		}
	}
	return max(wait, minLaneRetry)
}
