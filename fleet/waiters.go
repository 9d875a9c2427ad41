package fleet

import (
	"sync/atomic"
	"time"
)

// waiter is a booking that may wait in a queue for a lease.
type waiter struct {
	ch chan answer // the answer handed to it: one, buffered
	// since is when its booking's reply said it was queued (zero before):
	// a heartbeat sent earlier may not have seen it queued.
	since atomic.Int64
}

func (w *waiter) queued() { w.since.Store(time.Now().UnixNano()) }

// await registers member as a possible waiter, before its booking is sent.
func (f *Fleet) await(member string) *waiter {
	w := &waiter{ch: make(chan answer, 1)}
	f.wmu.Lock()
	f.waiters[member] = w
	f.wmu.Unlock()
	return w
}

func (f *Fleet) unwait(member string) {
	f.wmu.Lock()
	delete(f.waiters, member)
	f.wmu.Unlock()
}

// deliver hands a member's answer to its waiter. An answer read by a
// heartbeat (sent: when it was sent) that says the member is gone counts
// only if the member was queued before that heartbeat was sent.
func (f *Fleet) deliver(member string, a answer, sent time.Time) {
	f.wmu.Lock()
	w := f.waiters[member]
	f.wmu.Unlock()
	if w == nil {
		return // booked, given up, or not this replica's: nothing waits
	}
	if a.kind() == "gone" {
		since := w.since.Load()
		if since == 0 || sent.UnixNano() <= since {
			return
		}
	}
	select {
	case w.ch <- a:
	default: // already answered (the message and the heartbeat both)
	}
}
