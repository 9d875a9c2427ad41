package fleet

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLocal records what the fleet told a backend's local budget.
type fakeLocal struct {
	mu     sync.Mutex
	shares []float64
	paused time.Time
	open   time.Time
	ch     chan struct{} // nudged on every call
}

func newFakeLocal() *fakeLocal { return &fakeLocal{ch: make(chan struct{}, 64)} }

func (l *fakeLocal) nudge() {
	select {
	case l.ch <- struct{}{}:
	default:
	}
}
func (l *fakeLocal) Share(f float64) {
	l.mu.Lock()
	l.shares = append(l.shares, f)
	l.mu.Unlock()
	l.nudge()
}
func (l *fakeLocal) Pause(t time.Time) { l.mu.Lock(); l.paused = t; l.mu.Unlock(); l.nudge() }
func (l *fakeLocal) HoldOpen(t time.Time) {
	l.mu.Lock()
	l.open = t
	l.mu.Unlock()
	l.nudge()
}
func (l *fakeLocal) lastShare() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.shares) == 0 {
		return 1
	}
	return l.shares[len(l.shares)-1]
}

// newFleet returns a started Fleet on addr under prefix, closed at cleanup.
func newFleet(t *testing.T, addr, prefix, id string, opts ...Option) *Fleet {
	t.Helper()
	opts = append([]Option{WithPrefix(prefix), WithReplicaID(id), WithHeartbeat(100 * time.Millisecond), WithTTL(time.Second)}, opts...)
	f, err := Open("redis://"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.Start(context.Background())
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

// until polls cond (there is no event to wait for: the state is in Redis)
// until it holds or a generous deadline passes.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func rpm(per float64, burst int) batcher.Rate {
	return batcher.Rate{PerMinute: per, Burst: burst, Adaptive: true}
}

// book runs the acquire script once and returns its kind and delay; a
// booking it queued leaves the queue at once.
func book(t *testing.T, b *budget, member string, d batcher.Demand) (string, time.Duration, []any) {
	t.Helper()
	v, err := acquireScript.Run(context.Background(), b.f.rdb, b.keys,
		member, b.f.cfg.ttl.Milliseconds(), d.MaxConcurrency,
		d.RPM.PerMinute, d.RPM.Burst, flag(d.RPM.Adaptive), d.Requests,
		d.TPM.PerMinute, d.TPM.Burst, flag(d.TPM.Adaptive), d.Tokens, b.f.channel).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if v[0] == "queued" {
		if err := cancelScript.Run(context.Background(), b.f.rdb, b.keys, member).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ms, _ := parseFloat(v[1])
	return v[0].(string), time.Duration(ms * float64(time.Millisecond)), v
}

func TestGCRABooksAheadAtTheRate(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	// 6 RPM: one request each 10 s, so that a slow machine's milliseconds
	// do not show.
	d := batcher.Demand{Requests: 1, RPM: rpm(6, 10), MaxConcurrency: 100}
	// The burst goes at once...
	for i := range 10 {
		kind, delay, _ := book(t, b, "m"+string(rune('a'+i)), d)
		if kind != "ok" || delay > 0 {
			t.Fatalf("booking %d: %s after %v, want ok at once", i, kind, delay)
		}
	}
	// ...the next is booked 10 s ahead, the one after 20 s.
	_, d1, v := book(t, b, "mk", d)
	_, d2, _ := book(t, b, "ml", d)
	if d1 < 7*time.Second || d1 > 10*time.Second || d2-d1 < 9*time.Second || d2-d1 > 10*time.Second {
		t.Fatalf("delays %v, %v: want about 10s and 20s", d1, d2)
	}
	if left, _ := parseFloat(v[3]); left > -0.5 || left < -1.5 {
		t.Fatalf("requests left after booking 11 of a burst of 10: %v, want about -1", left)
	}
}

func TestReleaseRefundsWhatWasNotUsed(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, Tokens: 800, TPM: rpm(60000, 1000), MaxConcurrency: 10}
	tk, err := b.Acquire(context.Background(), d)
	if err != nil || !tk.Shared {
		t.Fatalf("Acquire: %+v, %v", tk, err)
	}
	if tk.RemainingTokens < 199 || tk.RemainingTokens > 201 {
		t.Fatalf("tokens left after booking 800 of 1000: %v", tk.RemainingTokens)
	}
	tk.Release(batcher.Outcome{Called: true, Requests: 1, Tokens: 100, Succeeded: true})
	// 700 came back: 900 left (plus what refilled, 1000/s, capped at the
	// burst); a booking of 850 goes at once.
	kind, delay, _ := book(t, b, "x", batcher.Demand{Tokens: 850, TPM: rpm(60000, 1000), MaxConcurrency: 10})
	if kind != "ok" || delay > 0 {
		t.Fatalf("after the refund: %s after %v, want ok at once", kind, delay)
	}
	// Tokens used beyond the booking are booked too (bounded overshoot).
	b2 := f.Budget("up2", newFakeLocal()).(*budget)
	tk, _ = b2.Acquire(context.Background(), batcher.Demand{Tokens: 600, TPM: rpm(60, 1000), MaxConcurrency: 10})
	tk.Release(batcher.Outcome{Called: true, Tokens: 1500})
	_, delay, _ = book(t, b2, "y", batcher.Demand{Tokens: 1, TPM: rpm(60, 1000), MaxConcurrency: 10})
	if delay < time.Minute {
		t.Fatalf("after 1,500 tokens used of 600 booked in a bucket of 1,000 at 1/s, the next waits %v, want minutes", delay)
	}
}

func TestLeasesBoundConcurrencyAndExpire(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	f := newFleet(t, addr, prefix, "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, MaxConcurrency: 2}
	t1, _ := b.Acquire(context.Background(), d)
	t2, _ := b.Acquire(context.Background(), d)
	if t2.Slots != 2 {
		t.Fatalf("slots left to this replica: %d, want 2 (it holds both)", t2.Slots)
	}
	if kind, _, _ := book(t, b, "third", d); kind != "queued" {
		t.Fatalf("third lease of two: %s, want queued", kind)
	}
	// A waiting Acquire gets the slot once one is released.
	got := make(chan batcher.Ticket)
	go func() {
		tk, _ := b.Acquire(context.Background(), d)
		got <- tk
	}()
	t1.Release(batcher.Outcome{})
	tk := <-got
	tk.Release(batcher.Outcome{})
	t2.Release(batcher.Outcome{})

	// A replica that dies (no release, no heartbeat) gives its slots back
	// within the TTL.
	dead, err := Open("redis://"+addr, WithPrefix(prefix), WithReplicaID("dead"), WithHeartbeat(100*time.Millisecond), WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	db := dead.Budget("up", newFakeLocal()).(*budget)
	acquired := time.Now() // its leases expire a TTL after Redis booked them, later than this
	_, _ = db.Acquire(context.Background(), d)
	_, _ = db.Acquire(context.Background(), d)
	_ = dead.rdb.Close() // dies: no release, no heartbeat
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tk, err = b.Acquire(ctx, d)
	if err != nil {
		t.Fatalf("a dead replica's lease never came back: %v", err)
	}
	tk.Release(batcher.Outcome{})
	if waited := time.Since(acquired); waited < 900*time.Millisecond {
		t.Fatalf("got a slot %v after the dead replica booked both: its leases should hold for their TTL (1s)", waited)
	}
}

func TestHeartbeatRenewsLeasesOfLongCalls(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, MaxConcurrency: 1}
	tk, _ := b.Acquire(context.Background(), d)
	defer tk.Release(batcher.Outcome{})
	// Three TTLs later the lease still holds: the heartbeat renews it.
	beats := f.Counters().Heartbeats
	until(t, "thirty heartbeats", func() bool { return f.Counters().Heartbeats >= beats+30 })
	if kind, _, _ := book(t, b, "other", d); kind != "queued" {
		t.Fatalf("the long call's lease lapsed: a second booking got %s", kind)
	}
}

func TestRateLimitPausesAndLowersTheFleet(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	a := newFleet(t, addr, prefix, "a")
	bf := newFleet(t, addr, prefix, "b")
	la, lb := newFakeLocal(), newFakeLocal()
	ba, bb := a.Budget("up", la).(*budget), bf.Budget("up", lb).(*budget)
	d := batcher.Demand{Requests: 1, RPM: rpm(600, 10), MaxConcurrency: 10}
	tk, _ := ba.Acquire(context.Background(), d)
	tk.Release(batcher.Outcome{Called: true, Requests: 1, RateLimited: true, RetryAfter: 30 * time.Second})
	// B's next booking, one round trip, hears of it: B pauses.
	kind, delay, _ := book(t, bb, "b1", d)
	if kind != "pause" || delay < 25*time.Second {
		t.Fatalf("B after A's 429: %s for %v, want a pause of about 30s", kind, delay)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-lb.ch; cancel() }()
	if _, err := bb.Acquire(ctx, d); err == nil {
		t.Fatal("Acquire went during the fleet's pause")
	}
	lb.mu.Lock()
	paused := lb.paused
	lb.mu.Unlock()
	if time.Until(paused) < 25*time.Second {
		t.Fatalf("B's local budget paused until %v, want about 30s ahead", paused)
	}
	st := peekNow(t, a, ba)
	if st.Factor != 0.5 {
		t.Fatalf("fleet factor after a 429: %v, want 0.5", st.Factor)
	}
}

func TestRemainingReadingDrainsTheFleet(t *testing.T) {
	addr := fleettest.Redis(t)
	f := newFleet(t, addr, fleettest.Prefix(t, addr), "a")
	b := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, RPM: rpm(60, 100), MaxConcurrency: 10}
	tk, _ := b.Acquire(context.Background(), d)
	if tk.RemainingRequests < 98 {
		t.Fatalf("left: %v, want 99", tk.RemainingRequests)
	}
	tk.Release(batcher.Outcome{Called: true, Requests: 1, Succeeded: true,
		RateLimit: &batcher.RateLimitInfo{RemainingRequests: 3, RemainingTokens: -1}})
	tk, _ = b.Acquire(context.Background(), d)
	defer tk.Release(batcher.Outcome{})
	if tk.RemainingRequests > 2.5 {
		t.Fatalf("left after the upstream said 3 remain and one more was booked: %v, want about 2", tk.RemainingRequests)
	}
}

func TestOpenBreakerHoldsTheFleetOpen(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	a, bf := newFleet(t, addr, prefix, "a"), newFleet(t, addr, prefix, "b")
	lb := newFakeLocal()
	ba, bb := a.Budget("up", newFakeLocal()).(*budget), bf.Budget("up", lb).(*budget)
	d := batcher.Demand{Requests: 1, MaxConcurrency: 10}
	tk, _ := ba.Acquire(context.Background(), d)
	tk.Release(batcher.Outcome{Called: true, OpenFor: 30 * time.Second})
	_, err := bb.Acquire(context.Background(), d)
	if err == nil {
		t.Fatal("B booked a batch while A's breaker is open")
	}
	lb.mu.Lock()
	open := lb.open
	lb.mu.Unlock()
	if time.Until(open) < 25*time.Second {
		t.Fatalf("B holds the backend open until %v, want about 30s ahead", open)
	}
}

func TestMembership(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	a := newFleet(t, addr, prefix, "a")
	b := newFleet(t, addr, prefix, "b")
	c := newFleet(t, addr, prefix, "c", WithInfo(map[string]string{"grpc": "127.0.0.1:1"}))
	until(t, "three replicas", func() bool { return a.Replicas() == 3 && b.Replicas() == 3 && c.Replicas() == 3 })
	st := a.Status()
	if len(st.Members) != 3 || !st.Redis {
		t.Fatalf("status: %+v", st)
	}
	for _, m := range st.Members {
		if m.ID == "c" && m.Info["grpc"] != "127.0.0.1:1" {
			t.Fatalf("c's info: %v", m.Info)
		}
	}
	_ = c.Close(context.Background())
	until(t, "two replicas after c left", func() bool { return a.Replicas() == 2 })
}

func TestLocalModeWhenRedisIsUnreachable(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	px := fleettest.Proxies(t, addr, 1)[0]
	a := newFleet(t, px.Addr(), prefix, "a")
	newFleet(t, addr, prefix, "b")
	newFleet(t, addr, prefix, "c")
	until(t, "three replicas", func() bool { return a.Replicas() == 3 })
	l := newFakeLocal()
	b := a.Budget("up", l).(*budget)
	d := batcher.Demand{Requests: 1, RPM: rpm(600, 10), MaxConcurrency: 10}

	px.Cut()
	// No booking fails: the first finds Redis gone and lets the batch go.
	tk, err := b.Acquire(context.Background(), d)
	if err != nil || tk.Shared || tk.Release != nil {
		t.Fatalf("Acquire with Redis cut: %+v, %v; want a local ticket", tk, err)
	}
	until(t, "local mode", a.Local)
	if s := l.lastShare(); math.Abs(s-1.0/3) > 1e-9 {
		t.Fatalf("local share: %v, want 1/3", s)
	}
	start := time.Now()
	for range 100 {
		if tk, err := b.Acquire(context.Background(), d); err != nil || tk.Shared {
			t.Fatalf("Acquire in local mode: %+v, %v", tk, err)
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("100 bookings in local mode took %v: they should not touch Redis", el)
	}
	if st := a.Status(); st.Redis {
		t.Fatal("status says Redis is reachable in local mode")
	}

	px.Restore()
	until(t, "rejoined", func() bool { return !a.Local() })
	if s := l.lastShare(); math.Abs(s-1.0/3) > 1e-9 {
		t.Fatalf("share after rejoining: %v, want 1/3 (bookings lift it)", s)
	}
	if tk, err := b.Acquire(context.Background(), d); err != nil || !tk.Shared {
		t.Fatalf("Acquire after rejoining: %+v, %v", tk, err)
	} else {
		tk.Release(batcher.Outcome{})
	}
	if n := a.Counters().LocalModes; n != 1 {
		t.Fatalf("local modes: %d, want 1", n)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"empty prefix", []Option{WithPrefix("")}, "fleet prefix"},
		{"bar in id", []Option{WithReplicaID("a|b")}, "fleet replica id"},
		{"slow heartbeat", []Option{WithHeartbeat(2 * time.Second), WithTTL(3 * time.Second)}, "fleet heartbeat"},
		{"timeout", []Option{WithTimeout(time.Microsecond)}, "fleet timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(fleettest.Client("127.0.0.1:1"), tc.opts...)
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := Open("http://x"); err == nil {
		t.Fatal("Open took a non-redis URL")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// peekNow reads a backend's shared state now.
func peekNow(t *testing.T, f *Fleet, b *budget) BackendStatus {
	t.Helper()
	v, err := peekScript.Run(context.Background(), f.rdb, b.keys[:2]).Slice()
	if err != nil {
		t.Fatal(err)
	}
	return b.peek(v)
}
