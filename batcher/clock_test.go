package batcher

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestMono: monos order and subtract as the times they stand for, a time
// without a monotonic reading (a deadline made from a date) compares with
// the current time as it did as a time.Time, and a deadline beyond the
// last mono is taken as it.
func TestMono(t *testing.T) {
	k := newClock()
	now := k.now()
	nowM := k.monoOf(now)
	later := now.Add(1500 * time.Millisecond)
	if got := k.monoOf(later) - nowM; got != mono(1500*time.Millisecond) {
		t.Errorf("monoOf(now+1.5s) - monoOf(now) = %v", time.Duration(got))
	}
	if got := monoAt(later, nowM, now); got != k.monoOf(later) {
		t.Errorf("monoAt(now+1.5s) = %d, monoOf = %d", got, k.monoOf(later))
	}
	if back := k.time(k.monoOf(later)); back.Sub(later) != 0 || !back.Equal(later) {
		t.Errorf("time(monoOf(t)) = %v, want %v", back, later)
	}
	wall := later.Round(0) // no monotonic reading: Sub reads the wall clocks
	if got := monoAt(wall, nowM, now); got != nowM+mono(wall.Sub(now)) || got-nowM != mono(1500*time.Millisecond) {
		t.Errorf("monoAt(wall-only now+1.5s) = now + %v", time.Duration(got-nowM))
	}
	if got := monoAt(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), nowM, now); got != maxMono {
		t.Errorf("monoAt(year 9999) = %d, want maxMono", got)
	}
	if got := monoAt(time.Time{}, nowM, now); got >= nowM {
		t.Errorf("monoAt(zero time) = %d, want before now (%d)", got, nowM)
	}
}

// TestDeadlineForMatchesTimes: deadlineFor, which works in monos, gives
// the instant the same choice made on time.Times gives (the earliest of
// the queue timeout, the request's timeout and ctx's deadline, converted
// once by monoAt), at the edges too: no ctx deadline, one earlier or
// later than the others, one without a monotonic reading, one long past,
// and timeouts so long that now plus them is beyond the last mono.
func TestDeadlineForMatchesTimes(t *testing.T) {
	b := &Batcher{clock: newClock(), cfg: &config{}}
	now := b.clock.now()
	nowM := b.clock.monoOf(now)
	old := func(ctx context.Context, req *Request) mono {
		deadline := now.Add(b.cfg.queueTimeout)
		if req.Timeout > 0 {
			if d := now.Add(req.Timeout); d.Before(deadline) {
				deadline = d
			}
		}
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		return monoAt(deadline, nowM, now)
	}
	huge := time.Duration(math.MaxInt64)
	ctxs := map[string]time.Time{
		"none":                {},
		"earlier":             now.Add(time.Millisecond),
		"between":             now.Add(3 * time.Second),
		"later":               now.Add(time.Hour),
		"wall-only earlier":   now.Add(time.Millisecond).Round(0),
		"wall-only year 9999": time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		"long past":           now.Add(-time.Hour),
		"zero time":           time.Time{}.Add(1), // a deadline, not "none"
	}
	for _, qt := range []time.Duration{5 * time.Second, huge, huge - 1, time.Duration(maxMono - nowM)} {
		for _, rt := range []time.Duration{0, time.Second, 10 * time.Second, MaxTimeout, huge} {
			for name, d := range ctxs {
				b.cfg.queueTimeout = qt
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if !d.IsZero() {
					ctx, cancel = context.WithDeadline(ctx, d)
				}
				req := &Request{Timeout: rt}
				if got, want := b.deadlineFor(ctx, req, &admittedAt{k: b.clock, m: nowM, t: now}), old(ctx, req); got != want {
					t.Errorf("queue %v, request %v, ctx %s: deadline now+%v, want now+%v",
						qt, rt, name, time.Duration(got-nowM), time.Duration(want-nowM))
				}
				cancel()
			}
		}
	}
	if got := nowM.after(huge); got != maxMono {
		t.Errorf("now.after(max duration) = %d, want maxMono", got)
	}
	if got := (maxMono - 1).after(2); got != maxMono {
		t.Errorf("(maxMono-1).after(2) = %d, want maxMono", got)
	}
	if got := (maxMono - 2).after(2); got != maxMono {
		t.Errorf("(maxMono-2).after(2) = %d, want maxMono", got)
	}
	if got := nowM.after(0); got != nowM {
		t.Errorf("now.after(0) = %d, want now (%d)", got, nowM)
	}
}

// TestTimeAtIsTheMono: the time.Time an admission builds from its mono
// stands for that mono exactly (Sub and Before agree with it), and its
// wall reading is base's plus the monotonic time since, as now's is, also
// when base is stale and read again.
func TestTimeAtIsTheMono(t *testing.T) {
	k := newClock()
	for _, stale := range []bool{false, true} {
		if stale {
			old := k.base.Load().Add(-2 * clockResync)
			k.base.Store(&old)
		}
		before := time.Now()
		m := k.nowMono()
		a := admittedAt{k: k, m: m}
		at := a.time()
		after := time.Now()
		if got := k.monoOf(at); got != m {
			t.Errorf("stale %v: monoOf(time()) = %d, want the mono %d", stale, got, m)
		}
		if at.Before(before) || at.After(after) {
			t.Errorf("stale %v: time() = %v, not within [%v, %v]", stale, at, before, after)
		}
		base := k.base.Load()
		if wall, want := at.Round(0), base.Round(0).Add(at.Sub(*base)); !wall.Equal(want) {
			t.Errorf("stale %v: wall reading %v, want base's plus the time since, %v", stale, wall, want)
		}
		if a.time() != at {
			t.Errorf("stale %v: a second time() built another time", stale)
		}
	}
}
