package batcher_test

import (
	"context"
	"fmt"
	"os"
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
}

func (sc scenario) run(t testing.TB) outcome {
	p, err := sim.New(sc.sim)
	if err != nil {
		t.Fatal(err)
	}
	bc := sc.backend
	bc.Name, bc.Backend = "sim", p
	b, err := batcher.New(
		batcher.WithBackend(bc),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpCompletion, Backend: "sim", Batch: sc.batch}),
		batcher.WithQueueCapacity(sc.requests),
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
	o.provider, o.core = p.Stats(), b.Stats()[0]
	if sc.wantClean && o.errors > 0 {
		t.Errorf("%d caller-visible errors, first: %v", o.errors, o.firstErr)
	}
	return o
}

// naive sends the same load straight to the provider: one call a request,
// no batching, no limiter, no retry.
func naive(t testing.TB, cfg sim.Config, callers, requests int) (time.Duration, sim.Stats, int64) {
	p, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ok, next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(requests) {
				if _, err := p.Call(context.Background(), "chat", batcher.Input{Op: batcher.OpCompletion, Prompt: "prompt"}, batcher.Params{}); err == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), p.Stats(), ok.Load()
}

// budgetUse is issue 3's benchmark 1: 600 RPM, 8 concurrent calls, 200 ms,
// native batches of up to 20; 20,000 requests from 200 callers.
var budgetUse = scenario{
	sim:       sim.Config{BaseLatency: 200 * time.Millisecond, MaxConcurrency: 8, RPM: 600, MaxBatchSize: 20},
	backend:   batcher.BackendConfig{MaxConcurrency: 8, RPM: 600},
	batch:     batcher.BatchConfig{MaxBatchSize: 20},
	callers:   200,
	requests:  20000,
	timeout:   10 * time.Minute,
	wantClean: true,
}

func TestScenarioBudgetUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := budgetUse.run(t)
		// The provider allows 600 calls a minute of 20 requests: 200 requests/s.
		const maxRate = 600.0 / 60 * 20
		got := float64(o.completed) / o.elapsed.Seconds()
		frac := got / maxRate
		t.Logf("batcher: %d requests in %v = %.1f req/s, %.3f of the provider's maximum; %d caller errors; %d upstream calls (%.1f requests each), %d 429s (%.2f%%); waits %v",
			o.completed, o.elapsed, got, frac, o.errors, o.provider.Calls, float64(o.provider.Items)/float64(o.provider.Calls),
			o.provider.RateLimited, 100*float64(o.provider.RateLimited)/float64(o.provider.Calls), o.core.Waits)
		if frac < 0.95 {
			t.Errorf("throughput %.3f of the provider's maximum, want at least 0.95", frac)
		}
		if o.provider.RateLimited*100 > o.provider.Calls {
			t.Errorf("%d 429s over %d calls, want at most 1%%", o.provider.RateLimited, o.provider.Calls)
		}
		d, st, ok := naive(t, budgetUse.sim, budgetUse.callers, budgetUse.requests)
		t.Logf("naive: %d of %d requests succeeded in %v = %.1f req/s; %d 429s (%.1f%% of calls)",
			ok, budgetUse.requests, d, float64(ok)/d.Seconds(), st.RateLimited, 100*float64(st.RateLimited)/float64(st.Calls))
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
		b.ReportMetric(float64(o.completed)/o.elapsed.Seconds()/200, "of-max")
		b.ReportMetric(float64(o.provider.RateLimited), "429s")
		b.ReportMetric(float64(o.errors), "errors")
	}
}
