package jobs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/cputime"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
)

// benchItems is the job size of BenchmarkJob: BATCHER_JOBS_BENCH_ITEMS,
// default 100,000 (the BENCHMARKS.md figures use 1,000,000).
func benchItems() int {
	if n, err := strconv.Atoi(os.Getenv("BATCHER_JOBS_BENCH_ITEMS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// peakRSS returns the process's peak resident set (VmHWM), in MiB.
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// instantCore is a core on a simulated backend that answers at once.
func instantCore(b testing.TB) *batcher.Batcher {
	p, err := sim.New(sim.Config{})
	if err != nil {
		b.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithQueueCapacity(100_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 64}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MaxBatchSize: 100, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}}),
	)
	if err != nil {
		b.Fatal(err)
	}
	return core
}

// BenchmarkJob runs one job of benchItems() items on an instant simulated
// backend per iteration, on each store, and reports items/s of the run
// (from queued to completed), of the creation, and the process's peak RSS;
// and, of the run alone, the process's CPU time and allocations per item
// and the most goroutines seen at once (sampled every 2ms), which load on
// a shared machine does not distort as it does items/s.
func BenchmarkJob(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			n := benchItems()
			var runSecs, createSecs float64
			var cpu time.Duration
			var mallocs uint64
			peakG := 0
			for b.Loop() {
				dir := b.TempDir()
				var store jobs.Store
				var err error
				if kind == "sqlite" {
					store, err = jobs.OpenSQLite(context.Background(), dir)
				} else {
					store, err = jobs.OpenPostgres(context.Background(), storetest.PostgresSchema(b))
				}
				if err != nil {
					b.Fatal(err)
				}
				core := instantCore(b)
				m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: kind == "sqlite"})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				start := time.Now()
				c, err := m.Begin(ctx, jobs.Spec{Model: "chat"})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					if err := c.Add(ctx, "", chatItem("item "+strconv.Itoa(i)+" asks a short question")); err != nil {
						b.Fatal(err)
					}
				}
				// Start the manager only now, so that the run is timed alone.
				j, err := c.Finish(ctx)
				if err != nil {
					b.Fatal(err)
				}
				createSecs += time.Since(start).Seconds()
				var ms0 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := cputime.Process()
				sampled := sampleGoroutines(2 * time.Millisecond)
				start = time.Now()
				if err := m.Start(ctx); err != nil {
					b.Fatal(err)
				}
				var last jobs.Progress
				if err := m.Watch(ctx, j.ID, 200*time.Millisecond, func(p jobs.Progress) error { last = p; return nil }); err != nil {
					b.Fatal(err)
				}
				runSecs += time.Since(start).Seconds()
				cpu += cputime.Process() - cpu0
				peakG = max(peakG, sampled())
				var ms1 runtime.MemStats
				runtime.ReadMemStats(&ms1)
				mallocs += ms1.Mallocs - ms0.Mallocs
				if last.State != jobs.StateCompleted || last.Counts.Succeeded != int64(n) {
					b.Fatalf("job ended %s %+v", last.State, last.Counts)
				}
				if fi, err := os.Stat(filepath.Join(jobs.JobDir(dir, j.ID), jobs.ResultsFile)); err != nil || fi.Size() == 0 {
					b.Fatalf("results.jsonl: %v", err)
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_ = m.Shutdown(sctx)
				_ = core.Shutdown(sctx)
				cancel()
				_ = store.Close()
			}
			b.ReportMetric(float64(n*b.N)/runSecs, "items/s")
			b.ReportMetric(float64(n*b.N)/createSecs, "created/s")
			b.ReportMetric(peakRSS(), "peak-MiB")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(n*b.N), "cpu-ns/item")
			b.ReportMetric(float64(mallocs)/float64(n*b.N), "allocs/item")
			b.ReportMetric(float64(peakG), "peak-goroutines")
			b.ReportMetric(0, "ns/op")
			fmt.Fprintf(os.Stderr, "%s: %d items, run %.1fs, create %.1fs\n", kind, n, runSecs/float64(b.N), createSecs/float64(b.N))
		})
	}
}

// sampleGoroutines counts the process's goroutines every interval until
// the returned function is called, which returns the most it saw.
func sampleGoroutines(interval time.Duration) func() int {
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		peak := runtime.NumGoroutine()
		for {
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
				peak = max(peak, runtime.NumGoroutine())
			}
		}
	}()
	return func() int {
		close(stop)
		return <-done
	}
}

// boundCore is a core on a simulated backend that is upstream-bound: conc
// concurrent calls of 10 items, latency each.
func boundCore(b testing.TB, latency time.Duration, conc int) *batcher.Batcher {
	core, _ := boundCoreSim(b, latency, conc)
	return core
}

func boundCoreSim(b testing.TB, latency time.Duration, conc int) (*batcher.Batcher, *sim.Provider) {
	p, err := sim.New(sim.Config{BaseLatency: latency})
	if err != nil {
		b.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithQueueCapacity(100_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: conc}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}}),
	)
	if err != nil {
		b.Fatal(err)
	}
	return core, p
}

// BenchmarkReplicas runs one upstream-bound job on PostgreSQL with one
// replica, then with two sharing it (each with its own core and backend
// budget), and reports each one's items/s and their ratio. The job has
// BATCHER_REPLICAS_BENCH_ITEMS items, default 24,000: 30 s on one replica,
// so that the ratio measures throughput; the two replicas' fixed costs
// (their start, about 0.1 s later than one's, and the tail, where one
// replica still holds items the other could run) are about 0.5 s, which
// a 6,000-item job (7.5 s) shows as 0.1 of the ratio.
func BenchmarkReplicas(b *testing.B) {
	n := 24_000
	if v, err := strconv.Atoi(os.Getenv("BATCHER_REPLICAS_BENCH_ITEMS")); err == nil && v > 0 {
		n = v
	}
	rate := map[int]float64{}
	for b.Loop() {
		for _, replicas := range []int{1, 2} {
			store, err := jobs.OpenPostgres(context.Background(), storetest.PostgresSchema(b))
			if err != nil {
				b.Fatal(err)
			}
			var ms []*jobs.Manager
			var cores []*batcher.Batcher
			var sims []*sim.Provider
			for range replicas {
				core, p := boundCoreSim(b, 50*time.Millisecond, 4)
				sims = append(sims, p)
				m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: b.TempDir(), PollInterval: 100 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				ms, cores = append(ms, m), append(cores, core)
			}
			ctx := context.Background()
			// In flight: five times what the backend serves at once (4 calls of 10).
			c, err := ms[0].Begin(ctx, jobs.Spec{Model: "chat", ConcurrentRequests: 200})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := c.Add(ctx, "", chatItem("q "+strconv.Itoa(i))); err != nil {
					b.Fatal(err)
				}
			}
			j, err := c.Finish(ctx)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, m := range ms {
				if err := m.Start(ctx); err != nil {
					b.Fatal(err)
				}
			}
			var last jobs.Progress
			if err := ms[0].Watch(ctx, j.ID, 50*time.Millisecond, func(p jobs.Progress) error { last = p; return nil }); err != nil {
				b.Fatal(err)
			}
			rate[replicas] += float64(n) / time.Since(start).Seconds()
			for i, p := range sims {
				st := p.Stats()
				fmt.Fprintf(os.Stderr, "replicas %d: #%d served %d items in %d calls, %v\n", replicas, i, st.Items, st.Calls, time.Since(start).Round(time.Millisecond))
			}
			if last.Counts.Succeeded != int64(n) {
				b.Fatalf("%d replicas: %+v", replicas, last.Counts)
			}
			for i := range ms {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = ms[i].Shutdown(sctx)
				_ = cores[i].Shutdown(sctx)
				cancel()
			}
			_ = store.Close()
		}
	}
	b.ReportMetric(rate[1]/float64(b.N), "items/s-1")
	b.ReportMetric(rate[2]/float64(b.N), "items/s-2")
	b.ReportMetric(rate[2]/rate[1], "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkETA runs a steady job (upstream-bound) and reports the ETA's
// error when 20% and 50% of it are done: |predicted end − actual end| over
// the actual time left then.
func BenchmarkETA(b *testing.B) {
	n := benchItems()
	var err20, err50 float64
	for b.Loop() {
		dir := b.TempDir()
		store, err := jobs.OpenSQLite(context.Background(), dir)
		if err != nil {
			b.Fatal(err)
		}
		core := boundCore(b, 20*time.Millisecond, 8) // 4,000 items/s
		m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: true})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		c, err := m.Begin(ctx, jobs.Spec{Model: "chat"})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if err := c.Add(ctx, "", chatItem("q "+strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
		j, err := c.Finish(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		var at20, at50 time.Time
		var eta20, eta50 time.Duration
		if err := m.Watch(ctx, j.ID, 100*time.Millisecond, func(p jobs.Progress) error {
			done := float64(p.Counts.Ended()) / float64(p.Counts.Total)
			if at20.IsZero() && done >= 0.2 && p.ETA >= 0 {
				at20, eta20 = p.Time, p.ETA
			}
			if at50.IsZero() && done >= 0.5 && p.ETA >= 0 {
				at50, eta50 = p.Time, p.ETA
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		left20, left50 := end.Sub(at20), end.Sub(at50)
		err20 += abs(float64(eta20-left20)) / float64(left20)
		err50 += abs(float64(eta50-left50)) / float64(left50)
		fmt.Fprintf(os.Stderr, "ETA at 20%%: %v (actual %v); at 50%%: %v (actual %v)\n", eta20.Round(time.Millisecond), left20.Round(time.Millisecond), eta50.Round(time.Millisecond), left50.Round(time.Millisecond))
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = m.Shutdown(sctx)
		_ = core.Shutdown(sctx)
		cancel()
		_ = store.Close()
	}
	b.ReportMetric(100*err20/float64(b.N), "eta-err20-%")
	b.ReportMetric(100*err50/float64(b.N), "eta-err50-%")
	b.ReportMetric(0, "ns/op")
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// BenchmarkListResults lists every result of a finished job of
// BATCHER_JOBS_BENCH_ITEMS items (default 100,000), 500 a page as
// ListJobResults does, on each store, with autovacuum off on PostgreSQL so
// that the plans cannot lean on it. It reports the seconds of the whole
// listing (the bound: 3 s for 100k).
func BenchmarkListResults(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			n := benchItems()
			dir := b.TempDir()
			ctx := context.Background()
			var store jobs.Store
			var err error
			if kind == "sqlite" {
				store, err = jobs.OpenSQLite(ctx, dir)
			} else {
				dsn := storetest.PostgresSchema(b)
				if store, err = jobs.OpenPostgres(ctx, dsn); err == nil {
					err = storetest.PostgresExec(ctx, dsn, "ALTER TABLE tasks SET (autovacuum_enabled = false)")
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = store.Close() }()
			core := instantCore(b)
			m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: kind == "sqlite"})
			if err != nil {
				b.Fatal(err)
			}
			c, err := m.Begin(ctx, jobs.Spec{Model: "chat"})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := c.Add(ctx, "", chatItem("item "+strconv.Itoa(i)+" asks a short question")); err != nil {
					b.Fatal(err)
				}
			}
			j, err := c.Finish(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Start(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Watch(ctx, j.ID, 200*time.Millisecond, func(jobs.Progress) error { return nil }); err != nil {
				b.Fatal(err)
			}
			var secs float64
			for b.Loop() {
				start := time.Now()
				got, after := 0, int64(-1)
				for {
					ts, err := m.Results(ctx, j.ID, after, jobs.ItemPending, 500)
					if err != nil {
						b.Fatal(err)
					}
					if len(ts) == 0 {
						break
					}
					got += len(ts)
					after = ts[len(ts)-1].Seq
				}
				secs += time.Since(start).Seconds()
				if got != n {
					b.Fatalf("listed %d results, want %d", got, n)
				}
			}
			b.ReportMetric(secs/float64(b.N), "s/listing")
			b.ReportMetric(0, "ns/op")
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_ = m.Shutdown(sctx)
			_ = core.Shutdown(sctx)
		})
	}
}
