package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
)

// BenchmarkRestartPostgres is a restart after kill -9 on PostgreSQL: the
// previous life of the process left 1,000 tasks claimed under the default
// lease (30 s), and a new manager starts. It reports the seconds from the
// new manager's Start to the first item completed.
func BenchmarkRestartPostgres(b *testing.B) {
	var secs float64
	for b.Loop() {
		ctx := context.Background()
		store, err := jobs.OpenPostgres(ctx, storetest.PostgresSchema(b))
		if err != nil {
			b.Fatal(err)
		}
		id := queuedJob(b, store, 1000)
		if got, err := store.Claim(ctx, id, "previous-life", 1000, jobs.DefaultLease); err != nil || len(got) != 1000 {
			b.Fatalf("claim: %d, %v", len(got), err)
		}
		core := instantCore(b)
		m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		_ = m.Watch(wctx, id, 10*time.Millisecond, func(p jobs.Progress) error {
			if p.Counts.Succeeded > 0 {
				cancel()
			}
			return nil
		})
		secs += time.Since(start).Seconds()
		cancel()
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		_ = m.Shutdown(sctx)
		_ = core.Shutdown(sctx)
		scancel()
		_ = store.Close()
	}
	b.ReportMetric(secs/float64(b.N), "s-to-first-item")
	b.ReportMetric(0, "ns/op")
}
