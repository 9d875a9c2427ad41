package batcher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// The dispatch scenarios of BENCHMARKS.md. Each runs in a synctest bubble,
// so its timings are those of the simulated provider's latency model, exact
// and repeatable; the Benchmark twins run the short ones in real time.

type scenario struct {
	sim       sim.Config
	backend   batcher.BackendConfig
	batch     batcher.BatchConfig
	callers   int
	requests  int
	timeout   time.Duration
	wantClean bool // no caller-visible error allowed
}

type outcome struct {
	elapsed   time.Duration
	errors    int64
	firstErr  error
	provider  sim.Stats
	core      batcher.BackendStats
	completed int64
	maxGap    time.Duration // longest spell without a dispatch while requests waited
}

// gapLog wraps a backend and keeps the longest gap between dispatches.
type gapLog struct {
	batcher.Backend
	mu     sync.Mutex
	last   time.Time
	maxGap time.Duration
}

func (g *gapLog) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	now := time.Now()
	g.mu.Lock()
	if !g.last.IsZero() {
		g.maxGap = max(g.maxGap, now.Sub(g.last))
	}
	g.last = now
	g.mu.Unlock()
	return g.Backend.Dispatch(ctx, b, out)
}

func (sc scenario) run(t testing.TB) outcome {
	p, err := sim.New(sc.sim)
	if err != nil {
		t.Fatal(err)
	}
	bc := sc.backend
	gaps := &gapLog{Backend: p}
	bc.Name, bc.Backend = "sim", gaps
	b, err := batcher.New(
		batcher.WithBackend(bc),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpCompletion, Backend: "sim", Batch: sc.batch}),
		batcher.WithQueueCapacity(sc.requests),
		batcher.WithQueueReserve(0), // sized for exactly its load, none of it URGENT
		batcher.WithQueueTimeout(time.Hour),
	)
	if err != nil {
		t.Fatal(err)
	}
	var o outcome
	var errOnce sync.Once
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range sc.callers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(sc.requests) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), sc.timeout)
				_, err := b.Do(ctx, &batcher.Request{ID: fmt.Sprint(i), Route: "chat",
					Input: batcher.Input{Op: batcher.OpCompletion, Prompt: fmt.Sprint("prompt ", i)}})
				cancel()
				if err != nil {
					atomic.AddInt64(&o.errors, 1)
					errOnce.Do(func() { o.firstErr = err })
				} else {
					atomic.AddInt64(&o.completed, 1)
				}
			}
		})
	}
	wg.Wait()
	o.elapsed = time.Since(start)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	o.provider, o.core, o.maxGap = p.Stats(), b.Stats()[0], gaps.maxGap
	if sc.wantClean && o.errors > 0 {
		t.Errorf("%d caller-visible errors, first: %v", o.errors, o.firstErr)
	}
	return o
}

// naive sends the same load straight to the provider, one call a request,
// no batching and no limiter, as a careful client would: each caller waits
// out the provider's Retry-After and tries again, until its request
// succeeds or the deadline passes.
func naive(t testing.TB, cfg sim.Config, callers, requests int, deadline time.Duration) (time.Duration, sim.Stats, int64) {
	p, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ok, next atomic.Int64
	start := time.Now()
	end := start.Add(deadline)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(requests) {
				for time.Now().Before(end) {
					_, err := p.Call(context.Background(), "chat", batcher.Input{Op: batcher.OpCompletion, Prompt: "prompt"}, batcher.Params{})
					if err == nil {
						ok.Add(1)
						break
					}
					var ue *batcher.UpstreamError
					if !errors.As(err, &ue) || ue.RateLimit == nil || ue.RateLimit.RetryAfter <= 0 {
						break
					}
					time.Sleep(ue.RateLimit.RetryAfter)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), p.Stats(), ok.Load()
}

// budgetScenario is issue 15's provider: a request bucket of burst that
// refills 10 a second (600 RPM), 8 concurrent calls, 200 ms a call, native
// batches of up to 20; requests from 200 callers.
func budgetScenario(burst, requests int, lag time.Duration, be batcher.BackendConfig) scenario {
	be.MaxConcurrency = 8
	return scenario{
		sim:       sim.Config{BaseLatency: 200 * time.Millisecond, MaxConcurrency: 8, RPM: 600, RPMBurst: burst, MaxBatchSize: 20, HeaderLag: lag},
		backend:   be,
		batch:     batcher.BatchConfig{MaxBatchSize: 20},
		callers:   200,
		requests:  requests,
		timeout:   10 * time.Minute,
		wantClean: true,
	}
}

// budgetUse is issue 3's benchmark 1: 600 RPM with a one-second bucket,
// 20,000 requests, the core told the RPM.
var budgetUse = budgetScenario(10, 20000, 0, batcher.BackendConfig{RPM: 600})

// maxRequests is the most requests the provider of budgetScenario can
// answer by elapsed: each call carries 20, the bucket allows burst +
// 10·T calls, and 8 slots of 200 ms allow 40·T. The initial burst counts,
// so no run can pass 1.
func maxRequests(burst int, elapsed time.Duration) float64 {
	t := elapsed.Seconds()
	return 20 * min(float64(burst)+10*t, 40*t)
}

func TestScenarioBudgetUse(t *testing.T) {
	cases := []struct {
		name  string
		sc    scenario
		burst int
	}{
		// Issue 3's case: the core told the RPM and the provider's one-second burst.
		{"told, burst 1s", budgetUse, 10},
		// Issue 15's: a provider that allows a minute's burst.
		{"told rpm only, burst 1m", budgetScenario(600, 24000, 0, batcher.BackendConfig{RPM: 600}), 600},
		{"untold, burst 1m", budgetScenario(600, 24000, 0, batcher.BackendConfig{}), 600},
		{"untold, burst 1s", budgetScenario(10, 6000, 0, batcher.BackendConfig{}), 10},
		{"untold, burst 1m, headers 1s stale", budgetScenario(600, 24000, time.Second, batcher.BackendConfig{}), 600},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := tc.sc.run(t)
				most := maxRequests(tc.burst, o.elapsed)
				frac := float64(o.completed) / most
				t.Logf("batcher: %d requests in %v, %.3f of the provider's maximum (%.0f by then); %d caller errors; %d upstream calls (%.1f requests each), %d 429s (%.2f%%); longest gap %v; learned rpm %.0f burst %d; waits %v",
					o.completed, o.elapsed.Round(time.Millisecond), frac, most, o.errors, o.provider.Calls, float64(o.provider.Items)/float64(o.provider.Calls),
					o.provider.RateLimited, 100*float64(o.provider.RateLimited)/float64(o.provider.Calls), o.maxGap, o.core.RPM, o.core.RPMBurst, o.core.Waits)
				if frac < 0.95 {
					t.Errorf("throughput %.3f of the provider's maximum, want at least 0.95", frac)
				}
				if o.provider.RateLimited*100 > o.provider.Calls {
					t.Errorf("%d 429s over %d calls, want at most 1%%", o.provider.RateLimited, o.provider.Calls)
				}
				if o.maxGap > time.Second {
					t.Errorf("no dispatch for %v while requests waited, want at most 1s", o.maxGap)
				}
			})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		// As long as the core took: 100 s.
		d, st, ok := naive(t, budgetUse.sim, budgetUse.callers, budgetUse.requests, 100*time.Second)
		most := maxRequests(10, d)
		t.Logf("naive (Retry-After, no batching): %d of %d requests in %v = %.1f req/s, %.3f of the provider's maximum (%.0f); %d calls, %d 429s (%.1f%%)",
			ok, budgetUse.requests, d.Round(time.Millisecond), float64(ok)/d.Seconds(), float64(ok)/most, most, st.Calls, st.RateLimited, 100*float64(st.RateLimited)/float64(st.Calls))
	})
}

// headline is the seed design's case: 20 requests of 100 ms at parallelism 4.
func headline(native bool) scenario {
	sc := scenario{
		sim:       sim.Config{BaseLatency: 100 * time.Millisecond},
		backend:   batcher.BackendConfig{MaxConcurrency: 4},
		batch:     batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
		callers:   20,
		requests:  20,
		timeout:   time.Minute,
		wantClean: true,
	}
	if native {
		sc.batch = batcher.BatchConfig{MaxBatchSize: 20, MinBatchSize: 1}
	}
	return sc
}

func TestScenarioHeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := headline(false).run(t)
		t.Logf("no native batching, concurrency 4: %v (%d upstream calls)", o.elapsed, o.provider.Calls)
		if d := o.elapsed - 500*time.Millisecond; d < -25*time.Millisecond || d > 25*time.Millisecond {
			t.Errorf("took %v, want within 5%% of 500ms", o.elapsed)
		}
		o = headline(true).run(t)
		t.Logf("native batching: %v (%d upstream calls)", o.elapsed, o.provider.Calls)
		if o.elapsed >= 500*time.Millisecond {
			t.Errorf("native batching took %v, want well below 500ms", o.elapsed)
		}
	})
}

func flaky() scenario {
	return scenario{
		sim:       sim.Config{BaseLatency: 50 * time.Millisecond, FailureRate: 0.2, Seed: 7},
		backend:   batcher.BackendConfig{MaxConcurrency: 8},
		batch:     batcher.BatchConfig{MaxBatchSize: 10},
		callers:   100,
		requests:  5000,
		timeout:   2 * time.Minute,
		wantClean: false,
	}
}

func TestScenarioFlakyProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := flaky().run(t)
		var retries int64
		for _, n := range o.core.Retries {
			retries += n
		}
		rate := float64(o.completed) / float64(flaky().requests)
		t.Logf("20%% transient failures: %.2f%% succeeded (%d errors, first %v); %d calls, %d failed upstream, %d retries (%.2f per request)",
			100*rate, o.errors, o.firstErr, o.provider.Calls, o.provider.Failures, retries, float64(retries)/float64(flaky().requests))
		// Four attempts that each fail independently with p = 0.2 leave
		// 0.2^4 = 0.16% failed: 8 of 5000 expected, 20 would be far out.
		if o.errors > 20 {
			t.Errorf("%d requests failed; 3 retries should leave about 8", o.errors)
		}
	})
}

// BenchmarkScenarioHeadline runs the headline case in real time.
func BenchmarkScenarioHeadline(b *testing.B) {
	for _, native := range []bool{false, true} {
		b.Run(fmt.Sprint("native=", native), func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += headline(native).run(b).elapsed
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/run")
		})
	}
}

// BenchmarkScenarioBudgetUse runs issue 3's benchmark 1 in real time: about
// 100 s a run. Set BATCHER_SLOW_BENCH=1 to run it.
func BenchmarkScenarioBudgetUse(b *testing.B) {
	if os.Getenv("BATCHER_SLOW_BENCH") == "" {
		b.Skip("set BATCHER_SLOW_BENCH=1: a run takes about 100s")
	}
	for b.Loop() {
		o := budgetUse.run(b)
		b.ReportMetric(float64(o.completed)/maxRequests(10, o.elapsed), "of-max")
		b.ReportMetric(float64(o.provider.RateLimited), "429s")
		b.ReportMetric(float64(o.errors), "errors")
	}
}

// urgentLatencies runs URGENT requests, one every 500 ms for 40 s, against
// budgetScenario's provider (minute burst, the core told nothing), alone or
// under a flood of LOW requests from 200 callers, and returns their
// latencies, sorted.
func urgentLatencies(t *testing.T, flood bool, be batcher.BackendConfig) []time.Duration {
	sc := budgetScenario(600, 0, 0, be)
	p, err := sim.New(sc.sim)
	if err != nil {
		t.Fatal(err)
	}
	bc := sc.backend
	bc.Name, bc.Backend = "sim", p
	b, err := batcher.New(
		batcher.WithBackend(bc),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpCompletion, Backend: "sim", Batch: sc.batch}),
		batcher.WithQueueCapacity(100000),
		batcher.WithQueueTimeout(time.Hour),
	)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if flood {
		for g := range 200 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := b.Do(context.Background(), &batcher.Request{ID: fmt.Sprint("low-", g, "-", i), Route: "chat", Priority: batcher.PriorityLow,
						Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "low"}}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		time.Sleep(5 * time.Second) // the flood fills every slot
	}
	var lat []time.Duration
	for i := range 80 {
		start := time.Now()
		if _, err := b.Do(context.Background(), &batcher.Request{ID: fmt.Sprint("urgent-", i), Route: "chat", Priority: batcher.PriorityUrgent,
			Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "urgent"}}); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		time.Sleep(500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	slices.Sort(lat)
	return lat
}

// TestScenarioUrgentUnderFloodWithLending: with protected capacity lent to
// background work while no URGENT work waits, URGENT's p99 under a LOW
// flood stays within twice its latency on an idle system.
func TestScenarioUrgentUnderFloodWithLending(t *testing.T) {
	p99 := func(l []time.Duration) time.Duration { return l[len(l)*99/100] }
	synctest.Test(t, func(t *testing.T) {
		idle := urgentLatencies(t, false, batcher.BackendConfig{})
		lent := urgentLatencies(t, true, batcher.BackendConfig{})
		strict := urgentLatencies(t, true, batcher.BackendConfig{StrictProtectedShare: true})
		t.Logf("URGENT p50/p99: idle %v/%v; LOW flood with lending %v/%v (%.2fx idle p99); without lending %v/%v",
			idle[len(idle)/2], p99(idle), lent[len(lent)/2], p99(lent), float64(p99(lent))/float64(p99(idle)), strict[len(strict)/2], p99(strict))
		if p99(lent) > 2*p99(idle) {
			t.Errorf("URGENT p99 %v under a LOW flood with lending, want at most twice idle's %v", p99(lent), p99(idle))
		}
	})
}

// TestScenarioUrgentAdmittedUnderLowFlood is issue 8's admission case,
// scaled down tenfold to stay fast: a queue of 100 and five times as many
// LOW callers, each retrying 10 ms after a full queue; URGENT requests
// every 250 ms must still be admitted (at least 99%) with p99 at most twice
// idle.
func TestScenarioUrgentAdmittedUnderLowFlood(t *testing.T) {
	run := func(t *testing.T, flood bool) (admitted int, lat []time.Duration) {
		p, err := sim.New(sim.Config{BaseLatency: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		b, err := batcher.New(
			batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 8}),
			batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpCompletion, Backend: "sim", Batch: batcher.BatchConfig{MaxBatchSize: 10}}),
			batcher.WithQueueCapacity(100),
		)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if flood {
			for g := range 500 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, err := b.Do(context.Background(), &batcher.Request{ID: fmt.Sprint("low-", g, "-", i), Route: "chat", Priority: batcher.PriorityLow,
							Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "low"}})
						if err != nil {
							time.Sleep(10 * time.Millisecond)
						}
					}
				})
			}
			time.Sleep(2 * time.Second)
		}
		for i := range 100 {
			start := time.Now()
			_, err := b.Do(context.Background(), &batcher.Request{ID: fmt.Sprint("urgent-", i), Route: "chat", Priority: batcher.PriorityUrgent,
				Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "urgent"}})
			if err == nil {
				admitted++
				lat = append(lat, time.Since(start))
			}
			time.Sleep(250 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		slices.Sort(lat)
		return admitted, lat
	}
	synctest.Test(t, func(t *testing.T) {
		_, idle := run(t, false)
		n, flooded := run(t, true)
		p99 := func(l []time.Duration) time.Duration { return l[len(l)*99/100] }
		t.Logf("URGENT admitted %d of 100 under a 5x LOW flood; p99 %v (idle %v)", n, p99(flooded), p99(idle))
		if n < 99 {
			t.Errorf("%d of 100 URGENT requests admitted, want at least 99", n)
		}
		if p99(flooded) > 2*p99(idle) {
			t.Errorf("URGENT p99 %v under the flood, want at most twice idle's %v", p99(flooded), p99(idle))
		}
	})
}
