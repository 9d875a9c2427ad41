package batcher

import (
	"errors"
	"math"
	"sync"
	"time"
)

// dedupKey identifies identical requests: same route target, same
// parameters (all of them, also those a fan-out lane ignores), same
// Identity (which the response cache keys on too).
type dedupKey struct {
	lane laneKey
	// tenant keeps tenants apart: a request never shares another
	// tenant's upstream call, whose result and timing would tell it what
	// the other asked.
	tenant string
	id     Identity
}

// dedupGroup is one upstream request shared by identical requests: the
// leader goes through the lane and the upstream, the followers wait for its
// result.
type dedupGroup struct {
	key       dedupKey
	leader    *Call
	followers []*Call
}

// dedupTable holds the groups of requests in flight.
type dedupTable struct {
	mu     sync.Mutex
	groups map[dedupKey]*dedupGroup
}

// dedupable reports whether r may share an upstream call: by request, or by
// default where results are deterministic (embeddings; temperature 0 with a
// fixed seed). Sampling at temperature > 0 is never shared by default.
func dedupable(r *Request) bool {
	switch r.Dedup {
	case DedupOn:
		return true
	case DedupOff:
		return false
	}
	if r.Input.Op == OpEmbedding {
		return true
	}
	p := &r.Params
	return p.Temperature != nil && *p.Temperature == 0 && p.Seed != nil
}

// join makes c follow an identical request in flight, or lead a new group.
// It reports whether c follows (and so must not be queued). A follower's
// own deadline is watched by a timer armed here, under mu, so that it is in
// place before anyone else can see the follower.
func (t *dedupTable) join(c *Call, key laneKey) bool {
	k := dedupKey{lane: key, tenant: c.req.Tenant, id: c.identity()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.groups[k]; g != nil && g.leader.pending() {
		c.group = g
		g.followers = append(g.followers, c)
		c.timer = time.AfterFunc(math.MaxInt64, func() { c.finish(Result{Err: ErrDeadline}, time.Now()) })
		c.timer.Reset(time.Until(c.deadlineTime()))
		return true
	}
	if t.groups == nil {
		t.groups = make(map[dedupKey]*dedupGroup)
	}
	g := &dedupGroup{key: k, leader: c}
	t.groups[k] = g
	c.group = g
	return false
}

// leave is called once c has its result. A follower just leaves. A leader
// shares its result with its followers, unless it ended for a reason of its
// own (its caller's cancellation or deadline): then the first follower
// takes over and goes upstream in its place.
func (t *dedupTable) leave(c *Call, r *Result, now time.Time) {
	g := c.group
	t.mu.Lock()
	if g.leader != c {
		t.mu.Unlock()
		return
	}
	if t.groups[g.key] == g {
		delete(t.groups, g.key) // put back below if a follower takes over
	}
	followers := g.followers
	g.followers = nil
	own := errors.Is(r.Err, ErrCanceled) || errors.Is(r.Err, ErrDeadline)
	var next *Call
	if own {
		for i, f := range followers {
			if f.pending() {
				next, followers = f, followers[i+1:]
				break
			}
		}
	}
	if next != nil {
		g.leader, g.followers = next, followers
		if t.groups[g.key] == nil {
			t.groups[g.key] = g
		}
	}
	t.mu.Unlock()

	if next != nil {
		next.timer.Stop() // its lane watches its deadline now
		c.b.enqueue(next)
		return
	}
	shared := *r
	shared.Deduplicated = true
	for _, f := range followers {
		f.finish(shared, now)
	}
}
