package batcher

import (
	"math"
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
//
// It also gives a queued call's admission and deadline as monos: 8 bytes
// each instead of a time.Time's 24 (BenchmarkQueuedMemory).
type clock struct {
	base atomic.Pointer[time.Time]
	// epoch is the clock's start, with its monotonic reading: monos
	// count from it. Read once, at newClock (inside a synctest bubble
	// when the Batcher is made in one, so that monos follow its clock).
	epoch time.Time
}

func newClock() *clock {
	k := &clock{}
	t := time.Now()
	k.base.Store(&t)
	k.epoch = t
	return k
}

// mono is an instant on a clock's monotonic reading: nanoseconds since
// its epoch. Monos compare and subtract as integers, exactly as the
// time.Times they stand for (whose monotonic readings Before and Sub
// use); they are not wall times and are never compared with UnixNano.
type mono int64

// maxMono is the latest mono: a deadline beyond it is taken as it.
const maxMono = mono(math.MaxInt64)

// monoOf returns t as a mono. t must carry a monotonic reading (time.Now,
// the clock's now, and times added to them do); for one that may not (a
// context's deadline), use monoAt.
func (k *clock) monoOf(t time.Time) mono { return mono(t.Sub(k.epoch)) }

// monoAt returns t as a mono, now being the current time as a mono and
// nowT as a time.Time: nowT plus t.Sub(nowT). For a t with a monotonic
// reading that is monoOf(t); for one without it (a deadline made with
// time.Date), Sub reads the wall clocks, as Before and After do, so t
// compares with the current time as it did as a time.Time. It saturates
// at maxMono.
func monoAt(t time.Time, now mono, nowT time.Time) mono {
	d := mono(t.Sub(nowT))
	if d > 0 && now > maxMono-d {
		return maxMono
	}
	return now + d
}

// after returns m plus d, for a positive d, saturating at maxMono.
func (m mono) after(d time.Duration) mono {
	if m > maxMono-mono(d) {
		return maxMono
	}
	return m + mono(d)
}

// time returns m as a time.Time, with a monotonic reading: for events,
// results and contexts.
func (k *clock) time(m mono) time.Time { return k.epoch.Add(time.Duration(m)) }

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

// nowMono returns the current time as a mono: one monotonic reading and
// no time.Time to build, for Submit, which needs a time.Time only for a
// tenant, the cache, a sink's events or a ctx deadline (admission).
func (k *clock) nowMono() mono { return mono(time.Since(k.epoch)) }

// timeAt returns mono m, a recent reading of nowMono, as now would have
// returned it at m: base's wall reading plus the monotonic time since.
func (k *clock) timeAt(m mono) time.Time {
	base := k.base.Load()
	d := time.Duration(m - k.monoOf(*base))
	if d < 0 || d >= clockResync {
		t := time.Now()
		k.base.Store(&t)
		return t.Add(time.Duration(m - k.monoOf(t)))
	}
	return base.Add(d)
}

// admittedAt is the instant Submit admits a request at: its mono, read
// once, and its time.Time, built from it the first time it is asked for
// (time), which a plain request never does.
type admittedAt struct {
	k *clock
	m mono
	t time.Time
}

// time returns the admission as a time.Time.
func (a *admittedAt) time() time.Time {
	if a.t.IsZero() {
		a.t = a.k.timeAt(a.m)
	}
	return a.t
}
