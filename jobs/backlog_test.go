package jobs_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// A job larger than the core's queue keeps the items the core cannot take
// yet in its backlog: they are deferred, not rejected, and the job succeeds
// with batcher.requests.rejected at zero.
func TestBacklogIsNotRejection(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p, err := sim.New(sim.Config{BaseLatency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithMeterProvider(mp),
		batcher.WithQueueCapacity(4), // below the run's least window of 8: items wait in its backlog
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 2}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MaxBatchSize: 4, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 2 * time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store := openSQLite(t, dir)
	m := started(t, jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: true,
		CommitInterval: 5 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	e := &env{core: core, sim: p, store: store, m: m, dir: dir}
	defer shutdown(t, m, core)

	const n = 100
	j := e.create(t, jobs.Spec{Model: "chat"}, n)
	last, _ := e.wait(t, j.ID)
	if last.State != jobs.StateCompleted || last.Counts.Succeeded != n {
		t.Fatalf("job ended %s with %+v, want completed with %d succeeded", last.State, last.Counts, n)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if d, ok := mt.Data.(metricdata.Sum[int64]); ok {
				for _, pt := range d.DataPoints {
					sums[mt.Name] += pt.Value
				}
			}
		}
	}
	if sums["batcher.requests.rejected"] != 0 {
		t.Errorf("batcher.requests.rejected = %d after a job that fully succeeded, want 0", sums["batcher.requests.rejected"])
	}
	if sums["batcher.requests.deferred"] == 0 {
		t.Errorf("batcher.requests.deferred = 0: the job never outran the queue of 4 (sums %v)", sums)
	}
}
