package batcher

import (
	"sync/atomic"
	"time"
)

// clockResync is how long the hot path's clock goes between two full
// readings of the time.
const clockResync = time.Second

// clock reads the time where every request or batch does, at half the
// cost of time.Now: on Linux time.Now reads the wall clock and the
// monotonic clock, two vDSO calls, and time.Since(base) only the
// monotonic one (at 512 producers time.Now was about 55 ns of an item's
// 840). Its wall reading is base's plus the monotonic time since, with
// base read again once a second: it may lag a step of the system clock
// for that second, and is off by the clock's slew over a second at most
// (microseconds). Comparisons, Sub and timers use the monotonic reading,
// which is exact. Inside a testing/synctest bubble time.Since reads the
// bubble's clock, as time.Now does.
type clock struct {
	base atomic.Pointer[time.Time]
}

func newClock() *clock {
	k := &clock{}
	t := time.Now()
	k.base.Store(&t)
	return k
}

// now returns the current time.
func (k *clock) now() time.Time {
	base := k.base.Load()
	d := time.Since(*base)
	if d < 0 || d >= clockResync {
		t := time.Now()
		k.base.Store(&t)
		return t
	}
	return base.Add(d)
}
