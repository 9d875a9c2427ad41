package fleet

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
)

// upstream is a fake provider that every replica's backend calls: it books
// the time of each call, and may answer a replica's call with a 429.
type upstream struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	replica int
	at      time.Time
}

func (u *upstream) backend(replica int, limit func() *batcher.RateLimitInfo) batcher.Backend {
	return batcher.BackendFunc(func(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
		u.mu.Lock()
		u.calls = append(u.calls, call{replica, time.Now()})
		u.mu.Unlock()
		if limit != nil {
			if rl := limit(); rl != nil {
				return &batcher.UpstreamError{Class: batcher.ClassRateLimit, StatusCode: 429, Message: "slow down", RateLimit: rl}
			}
		}
		for i := range b.Requests {
			out[i].Text = "ok"
		}
		return nil
	})
}

func (u *upstream) snapshot() []call {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]call(nil), u.calls...)
}

// maxInWindow returns the most calls that started within any window w.
func maxInWindow(calls []call, w time.Duration) int {
	ts := make([]time.Time, len(calls))
	for i, c := range calls {
		ts[i] = c.at
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// replicas starts n Batchers, each with its own Fleet on the shared prefix,
// all sending to u at 600 RPM (a burst of 10) shared.
func replicas(t *testing.T, n int, addrs []string, prefix string, u *upstream, limits []func() *batcher.RateLimitInfo) ([]*batcher.Batcher, []*Fleet) {
	t.Helper()
	var bs []*batcher.Batcher
	var fs []*Fleet
	for i := range n {
		f := newFleet(t, addrs[i], prefix, fmt.Sprintf("r%d", i))
		var lim func() *batcher.RateLimitInfo
		if limits != nil {
			lim = limits[i]
		}
		b, err := batcher.New(
			batcher.WithCoordinator(f),
			batcher.WithBackend(batcher.BackendConfig{Name: "up", Backend: u.backend(i, lim), RPM: 600, MaxConcurrency: 4,
				Retry: batcher.RetryPolicy{MaxRetries: 5}}),
			batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "up",
				Batch: batcher.BatchConfig{MaxBatchSize: 5, Window: 10 * time.Millisecond}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		bs = append(bs, b)
		fs = append(fs, f)
	}
	return bs, fs
}

// load runs callers on every replica until stop is closed, and returns the
// errors they saw.
func load(bs []*batcher.Batcher, perReplica int, stop <-chan struct{}) func() (ok, failed int64, errs []error) {
	var wg sync.WaitGroup
	var okN, failN atomic.Int64
	var mu sync.Mutex
	var errs []error
	for ri, b := range bs {
		for c := range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := b.Do(context.Background(), &batcher.Request{
						ID: fmt.Sprintf("r%d-c%d-%d", ri, c, i), Route: "m",
						Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "hi"},
					})
					if err != nil {
						failN.Add(1)
						mu.Lock()
						if len(errs) < 5 {
							errs = append(errs, err)
						}
						mu.Unlock()
					} else {
						okN.Add(1)
					}
				}
			}()
		}
	}
	return func() (int64, int64, []error) {
		wg.Wait()
		return okN.Load(), failN.Load(), errs
	}
}

// awaitCalls waits until the upstream has seen n calls.
func awaitCalls(t *testing.T, u *upstream, n int) {
	t.Helper()
	until(t, fmt.Sprintf("%d upstream calls", n), func() bool { return len(u.snapshot()) >= n })
}

func TestReplicasShareTheRate(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	u := &upstream{}
	bs, fs := replicas(t, 3, []string{addr, addr, addr}, prefix, u, nil)
	stop := make(chan struct{})
	wait := load(bs, 20, stop)
	// 60 calls at 10/s: six seconds of saturation.
	awaitCalls(t, u, 60)
	close(stop)
	okN, failed, errs := wait()
	if failed > 0 {
		t.Fatalf("%d callers failed (of %d): %v", failed, okN+failed, errs)
	}
	calls := u.snapshot()
	// Each replica alone would send 600 RPM: together they must not. The
	// whole run holds at most the rate plus the burst (10/s, 10), give or
	// take a batch per replica (the machine may be slow to start one);
	// any two seconds likewise.
	sort.Slice(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
	span := calls[len(calls)-1].at.Sub(calls[0].at).Seconds()
	if bound := int(10*span) + 10 + 3; len(calls) > bound {
		t.Fatalf("%d upstream calls in %.1fs; the fleet's budget allows %d", len(calls), span, bound)
	}
	if m := maxInWindow(calls, 2*time.Second); m > 20+10+3 {
		t.Fatalf("%d upstream calls within two seconds; the fleet's budget allows 30", m)
	}
	per := map[int]int{}
	for _, c := range calls {
		per[c.replica]++
	}
	if len(per) != 3 {
		t.Fatalf("calls by replica: %v; every replica should have had a share", per)
	}
	var batches, trips int64
	for _, f := range fs {
		c := f.Counters()
		batches += c.Batches
		trips += c.Acquires + c.Releases
	}
	t.Logf("calls by replica %v; %d round trips for %d batches", per, trips, batches)
}

func TestOneReplicas429PausesEveryReplica(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	u := &upstream{}
	var fired atomic.Bool
	const pause = 4 * time.Second
	limits := []func() *batcher.RateLimitInfo{
		func() *batcher.RateLimitInfo { // replica 0 gets one 429
			if fired.CompareAndSwap(false, true) {
				return &batcher.RateLimitInfo{RetryAfter: pause, RemainingRequests: -1, RemainingTokens: -1}
			}
			return nil
		}, nil, nil,
	}
	bs, fs := replicas(t, 3, []string{addr, addr, addr}, prefix, u, limits)
	stop := make(chan struct{})
	wait := load(bs, 10, stop)
	// Wait for the pause to be in Redis: replica 0 has released its 429.
	b0 := fs[0].budgets[0]
	var pausedAt, pausedUntil time.Time
	until(t, "the fleet's pause", func() bool {
		st := peekNow(t, fs[0], b0)
		pausedAt, pausedUntil = time.Now(), st.PausedUntil
		return !pausedUntil.IsZero()
	})
	end := pausedUntil.Add(-300 * time.Millisecond)
	// Batches booked before the pause may still go (at most the leases
	// out, about a second ahead at 10/s); nothing booked after it.
	settle := pausedAt.Add(1500 * time.Millisecond)
	until(t, "the pause to pass", func() bool { return time.Now().After(end.Add(time.Second)) })
	close(stop)
	okN, failed, errs := wait()
	if failed > 0 {
		t.Fatalf("%d callers failed (of %d): %v", failed, okN+failed, errs)
	}
	var during []call
	for _, c := range u.snapshot() {
		if c.at.After(settle) && c.at.Before(end) {
			during = append(during, c)
		}
	}
	if len(during) > 0 {
		t.Fatalf("%d upstream calls during the fleet's pause (%v to %v), e.g. replica %d at %v",
			len(during), settle.Format("15:04:05.000"), end.Format("15:04:05.000"), during[0].replica, during[0].at.Format("15:04:05.000"))
	}
}

func TestRedisLostMidLoadServesOnLocalShares(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	pxs := fleettest.Proxies(t, addr, 3)
	var addrs []string
	for _, px := range pxs {
		addrs = append(addrs, px.Addr())
	}
	u := &upstream{}
	bs, fs := replicas(t, 3, addrs, prefix, u, nil)
	until(t, "three replicas", func() bool { return fs[0].Replicas() == 3 && fs[1].Replicas() == 3 && fs[2].Replicas() == 3 })
	stop := make(chan struct{})
	wait := load(bs, 20, stop)
	awaitCalls(t, u, 20)
	for _, px := range pxs {
		px.Cut()
	}
	cut := time.Now()
	until(t, "every replica in local mode", func() bool { return fs[0].Local() && fs[1].Local() && fs[2].Local() })
	n0 := len(u.snapshot())
	awaitCalls(t, u, n0+30) // three seconds on local shares
	for _, px := range pxs {
		px.Restore()
	}
	restored := time.Now()
	until(t, "every replica back", func() bool { return !fs[0].Local() && !fs[1].Local() && !fs[2].Local() })
	n1 := len(u.snapshot())
	awaitCalls(t, u, n1+20)
	close(stop)
	okN, failed, errs := wait()
	if failed > 0 {
		t.Fatalf("%d callers failed (of %d) with Redis gone: %v", failed, okN+failed, errs)
	}
	// On local shares each replica holds a third of the rate and of the
	// burst (10/3/s, burst 3): the fleet stays within the rate plus its
	// burst, plus what was booked when Redis went.
	var during []call
	for _, c := range u.snapshot() {
		if c.at.After(cut) && c.at.Before(restored) {
			during = append(during, c)
		}
	}
	secs := restored.Sub(cut).Seconds()
	if bound := int(10*secs) + 10 + 12; len(during) > bound {
		t.Fatalf("%d upstream calls in the %.1fs without Redis; the local shares allow %d", len(during), secs, bound)
	}
	if m := maxInWindow(during, time.Second); m > 10+10+12 {
		t.Fatalf("%d calls in one second without Redis", m)
	}
	for _, f := range fs {
		if f.Counters().LocalModes < 1 {
			t.Fatalf("%s never went to local mode", f.ID())
		}
	}
}
