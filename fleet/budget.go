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
	f      *Fleet
	name   string
	local  batcher.LocalBudget
	state  string // the state hash's key
	leases string // the lease set's key
	seq    atomic.Uint64

	mu   sync.Mutex
	mine map[string]struct{} // leases this replica holds: renewed by the heartbeat
	last batcher.Demand      // the last demand booked: its rates, for the status page
}

// Acquire implements batcher.SharedBudget.
func (b *budget) Acquire(ctx context.Context, d batcher.Demand) (batcher.Ticket, error) {
	f := b.f
	wait := minBusyWait
	for {
		if f.local.Load() {
			return batcher.Ticket{}, nil
		}
		member := f.cfg.id + "|" + strconv.FormatUint(b.seq.Add(1), 36)
		b.track(member, d)
		start := time.Now()
		// The command's own context: go-redis may derive contexts from it,
		// and the batch's context is one the core pools.
		v, err := acquireScript.Run(context.Background(), f.rdb, []string{b.state, b.leases},
			member, f.cfg.ttl.Milliseconds(), d.MaxConcurrency,
			d.RPM.PerMinute, d.RPM.Burst, flag(d.RPM.Adaptive), d.Requests,
			d.TPM.PerMinute, d.TPM.Burst, flag(d.TPM.Adaptive), d.Tokens).Slice()
		f.trips[opAcquire].Add(1)
		f.m.acquired(time.Since(start))
		if err != nil {
			b.untrack(member)
			f.lost(err)
			return batcher.Ticket{}, nil
		}
		kind, _ := v[0].(string)
		ms, _ := parseFloat(v[1])
		delay := time.Duration(ms * float64(time.Millisecond))
		switch kind {
		case "ok":
			f.batches.Add(1)
			t := b.ticket(member, d, v)
			if delay > 0 && !sleep(ctx, delay) {
				t.Release(batcher.Outcome{})
				return batcher.Ticket{}, ctx.Err()
			}
			return t, nil
		case "pause":
			b.untrack(member)
			b.local.Pause(time.Now().Add(delay))
			if !sleep(ctx, delay) {
				return batcher.Ticket{}, ctx.Err()
			}
		case "open":
			b.untrack(member)
			b.local.HoldOpen(time.Now().Add(delay))
			return batcher.Ticket{}, fmt.Errorf("%w: circuit open on backend %q (opened by another replica of the fleet)", batcher.ErrNoBackend, b.name)
		default: // busy: every lease is taken
			b.untrack(member)
			if !sleep(ctx, min(wait, max(delay, minBusyWait))) {
				return batcher.Ticket{}, ctx.Err()
			}
			wait = min(2*wait, maxBusyWait)
		}
	}
}

// ticket makes the booking's ticket from the acquire script's answer.
func (b *budget) ticket(member string, d batcher.Demand, v []any) batcher.Ticket {
	held, _ := v[2].(int64)
	t := batcher.Ticket{Shared: true, RemainingRequests: math.Inf(1), RemainingTokens: math.Inf(1)}
	if x, ok := parseFloat(v[3]); ok {
		t.RemainingRequests = x
	}
	if x, ok := parseFloat(v[4]); ok {
		t.RemainingTokens = x
	}
	rsAt, _ := v[5].(int64)
	tsAt, _ := v[6].(int64)
	b.mu.Lock()
	others := int(held) - len(b.mine)
	b.mu.Unlock()
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
	err := releaseScript.Run(context.Background(), f.rdb, []string{b.state, b.leases},
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

func (b *budget) track(member string, d batcher.Demand) {
	b.mu.Lock()
	b.mine[member] = struct{}{}
	b.last = d
	b.mu.Unlock()
}

func (b *budget) untrack(member string) {
	b.mu.Lock()
	delete(b.mine, member)
	b.mu.Unlock()
}

// myLeases returns the leases this replica holds, for renewal.
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
