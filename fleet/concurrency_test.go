package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
)

// While the fleet's concurrency, not its rate, binds (no rate budget, two
// slots for three replicas, each upstream call 20 ms, callers on every
// replica), a batch costs its booking and its release: a booking that
// finds both slots taken waits to be handed one, it does not poll.
// (Polling, as before, cost 3 to 4.5 round trips a batch here.)
func TestRoundTripsWhileConcurrencyBinds(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	u := &upstream{}
	var fs []*Fleet
	var bs []*batcher.Batcher
	for i := range 3 {
		f := newFleet(t, addr, prefix, fmt.Sprintf("r%d", i))
		slow := batcher.BackendFunc(func(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
			u.mu.Lock()
			u.calls = append(u.calls, call{i, time.Now()})
			u.mu.Unlock()
			// The upstream's latency: what makes the slots bind.
			tm := time.NewTimer(20 * time.Millisecond)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			for j := range b.Requests {
				out[j].Text = "ok"
			}
			return nil
		})
		b, err := batcher.New(
			batcher.WithCoordinator(f),
			batcher.WithBackend(batcher.BackendConfig{Name: "up", Backend: slow, MaxConcurrency: 2}),
			batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "up",
				Batch: batcher.BatchConfig{MaxBatchSize: 5, Window: 5 * time.Millisecond}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
		fs, bs = append(fs, f), append(bs, b)
	}
	stop := make(chan struct{})
	wait := load(bs, 10, stop)
	awaitCalls(t, u, 20) // past the start
	var batches0, trips0 int64
	for _, f := range fs {
		c := f.Counters()
		batches0 += c.Batches
		trips0 += c.Acquires + c.Releases
	}
	awaitCalls(t, u, 170)
	var batches, trips int64
	for _, f := range fs {
		c := f.Counters()
		batches += c.Batches
		trips += c.Acquires + c.Releases
	}
	close(stop)
	if _, failed, errs := wait(); failed > 0 {
		t.Fatalf("%d callers failed: %v", failed, errs)
	}
	batches, trips = batches-batches0, trips-trips0
	per := float64(trips) / float64(batches)
	t.Logf("concurrency bound: %d round trips for %d batches: %.2f a batch", trips, batches, per)
	// A batch booked and not yet released when counted may leave one
	// trip over; polls would leave many.
	if per > 2.1 {
		t.Fatalf("%.2f round trips a batch while concurrency binds; want 2 (a booking and a release)", per)
	}
}
