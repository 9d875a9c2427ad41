package fleet

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
)

// queued returns how many bookings wait in b's queue, and the leases held.
func queued(t *testing.T, b *budget) (waiting, leases int64) {
	t.Helper()
	ctx := context.Background()
	w, err := b.f.rdb.ZCard(ctx, b.keys[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.f.rdb.ZCard(ctx, b.keys[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return w, l
}

// Waiters on a one-slot budget each get the slot in turn, in the order
// they came, told by the replica that released it: one booking and one
// release each, no polls.
func TestWaitersAreHandedTheSlotInTurn(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, MaxConcurrency: 1}
	holder, err := b.Acquire(context.Background(), d)
	if err != nil || !holder.Shared {
		t.Fatalf("Acquire: %+v, %v", holder, err)
	}
	before := f.Counters()
	const n = 8
	type got struct {
		i int
		t batcher.Ticket
	}
	tickets := make(chan got, n)
	for i := range n {
		go func() {
			tk, err := b.Acquire(context.Background(), d)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			tickets <- got{i, tk}
		}()
		// One at a time, so that the order they came in is known.
		until(t, "waiter "+strconv.Itoa(i)+" queued", func() bool { w, _ := queued(t, b); return w == int64(i+1) })
	}
	holder.Release(batcher.Outcome{})
	for want := range n {
		g := <-tickets
		if g.i != want || !g.t.Shared {
			t.Fatalf("waiter %d got the slot (shared %v), want waiter %d: first come, first served", g.i, g.t.Shared, want)
		}
		select {
		case other := <-tickets:
			t.Fatalf("waiters %d and %d hold the one slot at once", g.i, other.i)
		default:
		}
		g.t.Release(batcher.Outcome{})
	}
	after := f.Counters()
	acquires, releases := after.Acquires-before.Acquires, after.Releases-before.Releases
	perAcquisition := float64(acquires+releases) / n
	t.Logf("%d waiters: %d bookings, %d releases (the holder's included): %.2f round trips an acquisition", n, acquires, releases, perAcquisition)
	if acquires != n || releases != n+1 {
		t.Fatalf("%d bookings and %d releases for %d waiters (and the holder's release): want one each, no polls", acquires, releases, n)
	}
	if perAcquisition > 2+1.0/n {
		t.Fatalf("%.2f round trips an acquisition, want at most 2", perAcquisition)
	}
}

// A waiter whose batch ends leaves the queue; a lease handed to it before
// it heard is released, not leaked.
func TestCancelledWaiterLeaksNoSlot(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	// Not started: no subscription and no heartbeat, so that no hand-off
	// reaches the waiter before it is cancelled.
	f, err := Open("redis://"+addr, WithPrefix(prefix), WithReplicaID("a"), WithHeartbeat(100*time.Millisecond), WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, Tokens: 10, MaxConcurrency: 1}
	wait := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		go func() {
			tk, err := b.Acquire(ctx, d)
			if err == nil {
				tk.Release(batcher.Outcome{})
				err = errors.New("got the slot")
			}
			done <- err
		}()
		until(t, "the waiter queued", func() bool { w, _ := queued(t, b); return w == 1 })
		return done
	}

	// Cancelled while it waits: it leaves the queue.
	holder, _ := b.Acquire(context.Background(), d)
	ctx, cancel := context.WithCancel(context.Background())
	done := wait(ctx)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if w, _ := queued(t, b); w != 0 {
		t.Fatalf("%d waiters queued after the only one was cancelled", w)
	}
	holder.Release(batcher.Outcome{})
	if _, l := queued(t, b); l != 0 {
		t.Fatalf("%d leases held after the holder released: the slot went to the cancelled waiter", l)
	}

	// Handed the slot, but cancelled before it heard: it releases the lease.
	holder, _ = b.Acquire(context.Background(), d)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done = wait(ctx)
	holder.Release(batcher.Outcome{})
	if w, l := queued(t, b); w != 0 || l != 1 {
		t.Fatalf("after the release: %d queued, %d leases; want the slot handed to the waiter", w, l)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if w, l := queued(t, b); w != 0 || l != 0 {
		t.Fatalf("after the cancel: %d queued, %d leases; want the handed lease released", w, l)
	}
	if n, _ := f.rdb.HLen(context.Background(), b.keys[3]).Result(); n != 0 {
		t.Fatalf("%d entries left in the waiter hash", n)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second/2)
	defer cancel()
	tk, err := b.Acquire(ctx, d) // well within the TTL a leaked lease would hold
	if err != nil {
		t.Fatalf("the slot after the cancelled waiter: %v", err)
	}
	tk.Release(batcher.Outcome{})
}

// A hand-off's message lost: the waiter's replica learns it at its next
// heartbeat, and makes no round trip of its own.
func TestLostHandOffCompletesAtTheHeartbeat(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	f.dropNotes.Store(true)
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, MaxConcurrency: 1}
	holder, _ := b.Acquire(context.Background(), d)
	before := f.Counters()
	got := make(chan batcher.Ticket, 1)
	go func() {
		tk, _ := b.Acquire(context.Background(), d)
		got <- tk
	}()
	until(t, "the waiter queued", func() bool { w, _ := queued(t, b); return w == 1 })
	holder.Release(batcher.Outcome{})
	var tk batcher.Ticket
	select {
	case tk = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never learned it was handed the slot")
	}
	if !tk.Shared {
		t.Fatalf("ticket %+v: want booked through Redis", tk)
	}
	tk.Release(batcher.Outcome{})
	after := f.Counters()
	if acquires := after.Acquires - before.Acquires; acquires != 1 {
		t.Fatalf("%d bookings for one waiter: want one, no polls", acquires)
	}
	if after.Heartbeats == before.Heartbeats {
		t.Fatal("no heartbeat ran: what told the waiter?")
	}
}

// A replica that dies with a waiter queued, or with a lease handed to it,
// holds nothing past the TTL: the waiter lapses, the lease expires, and
// the heartbeat of a live replica hands the slot on.
func TestDeadWaitersLeaseExpires(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, MaxConcurrency: 1}
	holder, _ := b.Acquire(context.Background(), d)
	// A dead replica's waiter: queued, never renewed, nobody listening.
	v, err := acquireScript.Run(context.Background(), f.rdb, b.keys, "dead|1", f.cfg.ttl.Milliseconds(), 1,
		0, 0, 0, 1, 0, 0, 0, 0, f.cfg.prefix+":wake:dead").StringSlice()
	if err != nil || v[0] != "queued" {
		t.Fatalf("the dead replica's booking: %v, %v", v, err)
	}
	handed := time.Now()
	holder.Release(batcher.Outcome{}) // handed to the dead waiter
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tk, err := b.Acquire(ctx, d)
	if err != nil {
		t.Fatalf("the dead waiter's lease never came back: %v", err)
	}
	tk.Release(batcher.Outcome{})
	if waited := time.Since(handed); waited < 900*time.Millisecond {
		t.Fatalf("got the slot %v after it was handed to the dead waiter: its lease should hold for the TTL (1s)", waited)
	}
}
