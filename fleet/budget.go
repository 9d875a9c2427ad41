package fleet

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// budget is one backend's share of the fleet: it implements
// batcher.SharedBudget.
type budget struct {
	f     *Fleet
	name  string
	local batcher.LocalBudget
	keys  []string // the state hash, the lease set, the waiter queue, the waiter hash

	mu sync.Mutex
	// mine holds the members this replica has in Redis, renewed by the
	// heartbeat: true while one waits in the queue, false once it holds a
	// lease.
	mine map[string]bool
	last batcher.Demand // the last demand booked: its rates, for the status page
}

// answer is what a script (or a hand-off's message) says of a booking:
// kind "ok", "pause", "open", "queued" or "gone", then the fields of its
// kind (acquireScript's doc comment).
type answer []string

func (a answer) kind() string {
	if len(a) == 0 {
		return ""
	}
	return a[0]
}

// delay is the answer's wait: the delay of an "ok", the length of a pause
// or of an open breaker.
func (a answer) delay() time.Duration {
	if len(a) < 2 {
		return 0
	}
	ms, _ := parseFloat(a[1])
	return time.Duration(ms * float64(time.Millisecond))
}

func (a answer) int(i int) int64 {
	if len(a) <= i {
		return 0
	}
	x, _ := strconv.ParseInt(a[i], 10, 64)
	return x
}

// Acquire implements batcher.SharedBudget. A booking that finds every
// lease taken waits in the fleet's queue, without polling: the replica
// that frees a slot books it and tells this replica (scripts.go).
func (b *budget) Acquire(ctx context.Context, d batcher.Demand) (batcher.Ticket, error) {
	f := b.f
	for {
		if f.local.Load() {
			return batcher.Ticket{}, nil
		}
		member := f.cfg.id + "|" + strconv.FormatUint(f.seq.Add(1), 36)
		w := f.await(member) // before the script: a hand-off may come before its reply
		b.track(member, d, false)
		start := time.Now()
		// The command's own context: go-redis may derive contexts from it,
		// and the batch's context is one the core pools.
		v, err := acquireScript.Run(context.Background(), f.rdb, b.keys,
			member, f.cfg.ttl.Milliseconds(), d.MaxConcurrency,
			d.RPM.PerMinute, d.RPM.Burst, flag(d.RPM.Adaptive), d.Requests,
			d.TPM.PerMinute, d.TPM.Burst, flag(d.TPM.Adaptive), d.Tokens,
			f.channel).StringSlice()
		f.trips[opAcquire].Add(1)
		f.m.acquired(time.Since(start))
		if err != nil {
			f.unwait(member)
			b.untrack(member)
			f.lost(err)
			return batcher.Ticket{}, nil
		}
		a := answer(v)
		if a.kind() == "queued" {
			b.track(member, d, true)
			if a, err = b.wait(ctx, member, w, d); err != nil || a == nil {
				return batcher.Ticket{}, err // ctx ended, or local mode (nil)
			}
		}
		f.unwait(member)
		switch a.kind() {
		case "ok":
			f.batches.Add(1)
			t := b.ticket(member, d, a)
			if delay := a.delay(); delay > 0 && !sleep(ctx, delay) {
				t.Release(batcher.Outcome{})
				return batcher.Ticket{}, ctx.Err()
			}
			return t, nil
		case "pause":
			b.untrack(member)
			delay := a.delay()
			b.local.Pause(time.Now().Add(delay))
			if !sleep(ctx, delay) {
				return batcher.Ticket{}, ctx.Err()
			}
		case "open":
			b.untrack(member)
			b.local.HoldOpen(time.Now().Add(a.delay()))
			return batcher.Ticket{}, fmt.Errorf("%w: circuit open on backend %q (opened by another replica of the fleet)", batcher.ErrNoBackend, b.name)
		default: // gone: the queue lost it (its expiry lapsed); book again
			b.untrack(member)
		}
	}
}

// wait waits for the answer handed to a queued member: a message on the
// replica's channel, or the heartbeat's reading when the message was lost.
// When ctx ends first the member leaves the queue, and a lease handed to
// it meanwhile is released. It returns nil in local mode: the batch goes
// on the local share (the member lapses in Redis with its expiry).
func (b *budget) wait(ctx context.Context, member string, w *waiter, d batcher.Demand) (answer, error) {
	f := b.f
	w.queued()
	select {
	case a := <-w.ch:
		return a, nil
	case <-f.downCh():
		f.unwait(member)
		b.untrack(member)
		return nil, nil
	case <-ctx.Done():
	}
	f.unwait(member)
	var a answer
	select {
	case a = <-w.ch: // handed as ctx ended
	default:
		v, err := cancelScript.Run(context.Background(), f.rdb, b.keys, member).StringSlice()
		f.trips[opRelease].Add(1)
		if err != nil {
			b.untrack(member)
			f.lost(err)
			return nil, ctx.Err()
		}
		a = answer(v)
	}
	if a.kind() == "ok" {
		// A lease was handed to it: give it back, with what it booked.
		b.release(member, d, batcher.Outcome{}, a.int(5), a.int(6))
	} else {
		b.untrack(member)
	}
	return nil, ctx.Err()
}

// ticket makes the booking's ticket from an "ok" answer.
func (b *budget) ticket(member string, d batcher.Demand, a answer) batcher.Ticket {
	held := a.int(2)
	t := batcher.Ticket{Shared: true, RemainingRequests: math.Inf(1), RemainingTokens: math.Inf(1)}
	if x, ok := parseFloat(a[3]); ok {
		t.RemainingRequests = x
	}
	if x, ok := parseFloat(a[4]); ok {
		t.RemainingTokens = x
	}
	rsAt, tsAt := a.int(5), a.int(6)
	b.mu.Lock()
	b.mine[member] = false
	mine := 0
	for _, queued := range b.mine {
		if !queued {
			mine++
		}
	}
	b.mu.Unlock()
	others := int(held) - mine
	t.Slots = d.MaxConcurrency - max(others, 0)
	var once atomic.Bool
	t.Release = func(o batcher.Outcome) {
		if !once.CompareAndSwap(false, true) {
			return
		}
		b.release(member, d, o, rsAt, tsAt)
	}
	return t
}

// release ends a booking (the release script). In local mode it does
// nothing: the lease expires with its TTL.
func (b *budget) release(member string, d batcher.Demand, o batcher.Outcome, rsAt, tsAt int64) {
	defer b.untrack(member)
	f := b.f
	if f.local.Load() {
		return
	}
	remR, remT := int64(-1), int64(-1)
	if rl := o.RateLimit; rl != nil {
		remR, remT = max(rl.RemainingRequests, -1), max(rl.RemainingTokens, -1)
	}
	usedR, usedT := o.Requests, o.Tokens
	if !o.Called {
		usedR, usedT = 0, 0
	}
	err := releaseScript.Run(context.Background(), f.rdb, b.keys,
		member,
		d.RPM.PerMinute, d.RPM.Burst, flag(d.RPM.Adaptive), d.Requests, usedR, remR, rsAt,
		d.TPM.PerMinute, d.TPM.Burst, flag(d.TPM.Adaptive), d.Tokens, usedT, remT, tsAt,
		flag(o.RateLimited), o.RetryAfter.Milliseconds(), flag(o.Succeeded), o.OpenFor.Milliseconds(),
		adaptFloor, adaptStep, adaptSuccesses, lowerGap.Milliseconds()).Err()
	f.trips[opRelease].Add(1)
	if err != nil {
		f.lost(err)
	}
}

func (b *budget) track(member string, d batcher.Demand, queued bool) {
	b.mu.Lock()
	b.mine[member] = queued
	b.last = d
	b.mu.Unlock()
}

func (b *budget) untrack(member string) {
	b.mu.Lock()
	delete(b.mine, member)
	b.mu.Unlock()
}

// myLeases returns the leases this replica holds and its members that
// wait, for renewal.
func (b *budget) myLeases() []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]any, 0, len(b.mine))
	for m := range b.mine {
		out = append(out, m)
	}
	return out
}

// peek turns the peek script's answer into the backend's status.
func (b *budget) peek(v []any) BackendStatus {
	st := BackendStatus{Name: b.name, Factor: 1, RPMLeft: math.NaN(), TPMLeft: math.NaN(), Leases: map[string]int{}}
	if len(v) < 8 {
		return st
	}
	now, _ := parseFloat(v[0])
	at := func(i int) time.Time {
		if x, ok := parseFloat(v[i]); ok && x > now {
			return time.Now().Add(time.Duration((x - now) * float64(time.Millisecond)))
		}
		return time.Time{}
	}
	if x, ok := parseFloat(v[5]); ok {
		st.Factor = x
	}
	st.PausedUntil, st.OpenUntil = at(6), at(7)
	b.mu.Lock()
	d := b.last
	b.mu.Unlock()
	left := func(i int, r batcher.Rate) float64 {
		if r.PerMinute <= 0 {
			return math.NaN()
		}
		per := r.PerMinute
		if r.Adaptive {
			per *= st.Factor
		}
		iv := 60000 / per
		tat, ok := parseFloat(v[i])
		if !ok || tat < now {
			tat = now
		}
		return float64(r.Burst) - (tat-now)/iv
	}
	st.RPMLeft, st.TPMLeft = left(1, d.RPM), left(2, d.TPM)
	if x, ok := parseFloat(v[3]); ok {
		st.rs = int64(x)
	}
	if x, ok := parseFloat(v[4]); ok {
		st.ts = int64(x)
	}
	st.at = time.Now()
	for i := 8; i+1 < len(v); i += 2 {
		m, _ := v[i].(string)
		id, _, _ := strings.Cut(m, "|")
		st.Leases[id]++
	}
	return st
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
