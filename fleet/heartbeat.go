package fleet

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

func (f *Fleet) loop() {
	defer close(f.stopped)
	t := time.NewTicker(f.cfg.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		case <-f.kick:
		}
		f.beat(context.Background())
	}
}

// beat is one heartbeat: membership, the renewal of leases and waiters
// (and what was handed to the waiters, in case a message was lost) and
// the status view, in one round trip (a pipeline of scripts). Its failure puts the replica in
// local mode; its success after one brings it back.
func (f *Fleet) beat(ctx context.Context) {
	ttl := f.cfg.ttl.Milliseconds()
	f.mu.Lock()
	budgets := append([]*budget(nil), f.budgets...)
	info := f.infoJSON
	f.mu.Unlock()
	pipe := f.rdb.Pipeline()
	hb := heartbeatScript.Eval(ctx, pipe, []string{f.keys.members, f.keys.info}, f.cfg.id, ttl, info)
	peeks := make([]*redis.Cmd, len(budgets))
	var renews []*redis.Cmd
	sent := time.Now() // after every waiter this beat may call gone was queued
	for i, b := range budgets {
		if mine := b.myLeases(); len(mine) > 0 {
			args := append([]any{ttl}, mine...)
			renews = append(renews, renewScript.Eval(ctx, pipe, b.keys, args...))
		}
		peeks[i] = peekScript.Eval(ctx, pipe, b.keys[:2])
	}
	_, err := pipe.Exec(ctx)
	f.trips[opHeartbeat].Add(1)
	if err != nil {
		f.lost(err)
		return
	}
	// The fallback for lost messages: what was handed to this replica's
	// waiters, or that one is no longer queued.
	for _, r := range renews {
		notes, _ := r.StringSlice()
		for _, n := range notes {
			var note []string
			if json.Unmarshal([]byte(n), &note) == nil && len(note) >= 2 {
				f.deliver(note[0], answer(note[1:]), sent)
			}
		}
	}
	vals, _ := hb.Slice()
	st := Status{Self: f.cfg.id, Redis: true}
	for i := 0; i+1 < len(vals); i += 2 {
		id, _ := vals[i].(string)
		info, _ := vals[i+1].(string)
		m := Member{ID: id, Self: id == f.cfg.id}
		_ = json.Unmarshal([]byte(info), &m.Info)
		st.Members = append(st.Members, m)
	}
	n := max(1, len(st.Members))
	if old := f.n.Swap(int32(n)); int(old) != n {
		for _, b := range budgets {
			b.local.Share(1 / float64(n))
		}
	}
	for i, b := range budgets {
		v, _ := peeks[i].Slice()
		st.Backends = append(st.Backends, b.peek(v))
	}
	f.mu.Lock()
	prev := f.status
	st.Backends = withRates(st.Backends, prev)
	f.status = st
	f.mu.Unlock()
	f.rejoin(n)
}

// lost puts the replica in local mode after a failed command: every
// backend keeps its share (1/N) alone, concurrency included (bookings had
// let it borrow slots).
func (f *Fleet) lost(err error) {
	if !f.local.CompareAndSwap(false, true) {
		return
	}
	n := f.n.Load()
	f.leaves.Add(1)
	f.log.Warn("fleet: Redis unreachable; each backend keeps its local share of every budget until it answers",
		"replicas", n, "share", 1/float64(n), "err", err)
	f.mu.Lock()
	budgets := append([]*budget(nil), f.budgets...)
	f.status.Redis = false
	if f.local.Load() { // not rejoined meanwhile
		select {
		case <-f.down:
		default:
			close(f.down) // the waiters go on their local share
		}
	}
	f.mu.Unlock()
	for _, b := range budgets {
		b.local.Share(1 / float64(n))
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// rejoin takes the replica out of local mode once Redis answers again.
func (f *Fleet) rejoin(n int) {
	f.mu.Lock()
	if !f.local.CompareAndSwap(true, false) {
		f.mu.Unlock()
		return
	}
	select {
	case <-f.down:
		f.down = make(chan struct{})
	default:
	}
	f.mu.Unlock()
	f.log.Info("fleet: Redis reachable again; the fleet's budgets are shared again", "replicas", n)
}

// downCh returns a channel closed when the replica goes to local mode.
func (f *Fleet) downCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}
