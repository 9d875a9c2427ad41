package batcher

import (
	"fmt"
	"sync"
	"time"
)

// DefaultQueueReserve is the share of the queue held for URGENT and HIGH
// requests.
const DefaultQueueReserve = 0.1

// ErrEvicted: a queued LOW or DEFERRABLE request made room for an URGENT
// one in a full queue. It wraps ErrQueueFull, so callers retry it as they
// would a full queue.
var ErrEvicted = fmt.Errorf("%w: evicted to make room for URGENT work", ErrQueueFull)

// admission is the queue's policy: background work (NORMAL and below) may
// fill the queue only up to its capacity less the reserve; URGENT and HIGH
// may use all of it; and URGENT, finding the queue full, evicts the newest
// queued DEFERRABLE request, else the newest queued LOW one.
type admission struct {
	capacity   int64
	background int64 // what NORMAL and below may fill

	mu sync.Mutex
	// Admitted DEFERRABLE and LOW calls, oldest first, that eviction may
	// take; entries that left the queue are skipped and pruned.
	evictable [2][]*Call
	// pruneAt is the length at which evictable[k] is next pruned: twice
	// what was live at the last prune, so that pruning costs O(1) a call
	// and ended calls are held at most about as many as live ones, however
	// large the queue's capacity.
	pruneAt [2]int
}

func newAdmission(capacity int, reserve float64) *admission {
	return &admission{capacity: int64(capacity), background: int64(capacity) - int64(float64(capacity)*reserve),
		pruneAt: [2]int{minPruneAt, minPruneAt}}
}

// limitFor returns how far p may fill the queue.
func (a *admission) limitFor(p Priority) int64 {
	if p.background() {
		return a.background
	}
	return a.capacity
}

// evictClass returns c's eviction class, or -1 when it is not evictable.
func evictClass(p Priority) int {
	switch p {
	case PriorityDeferrable:
		return 0
	case PriorityLow:
		return 1
	}
	return -1
}

// minPruneAt is the least length at which an eviction list is pruned.
const minPruneAt = 64

// track makes c a candidate for eviction.
func (a *admission) track(c *Call) {
	k := evictClass(c.req.Priority)
	if k < 0 {
		return
	}
	a.mu.Lock()
	s := append(a.evictable[k], c)
	if len(s) > a.pruneAt[k] { // prune what left the queue
		live := s[:0]
		for _, x := range s {
			if x.pending() {
				live = append(live, x)
			}
		}
		clear(s[len(live):])
		s = live
		a.pruneAt[k] = max(minPruneAt, 2*len(live))
	}
	a.evictable[k] = s
	a.mu.Unlock()
}

// evict ends the newest queued DEFERRABLE call, else the newest queued LOW
// one, with ErrEvicted, and reports whether it found one. The evicted
// call's end frees its place in the queue.
func (a *admission) evict() bool {
	a.mu.Lock()
	var victim *Call
	for k := range a.evictable {
		s := a.evictable[k]
		for len(s) > 0 {
			c := s[len(s)-1]
			s[len(s)-1] = nil
			s = s[:len(s)-1]
			if c.pending() && c.queued.Load() {
				victim = c
				break
			}
		}
		a.evictable[k] = s
		if victim != nil {
			break
		}
	}
	a.mu.Unlock()
	return victim != nil && victim.finish(Result{Err: ErrEvicted}, time.Now())
}
