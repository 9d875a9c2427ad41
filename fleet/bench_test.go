package fleet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet/fleettest"
)

// BenchmarkFleetBooking measures what coordination adds to one batch on
// loopback: the booking's round trip before the upstream call (on the
// batch's path) and the release after it (off the path: after the results
// are delivered), and the round trips a batch costs. The budget never
// makes a booking wait here, so the figures are the round trips alone.
// Each iteration first times a bare PING: the baseline from the same
// moments, what the machine's loopback and scheduling cost before any
// script.
//
//	go test -run '^$' -bench BenchmarkFleetBooking -benchtime 2000x ./fleet/
func BenchmarkFleetBooking(b *testing.B) {
	addr := fleettest.Redis(b)
	prefix := fleettest.Prefix(b, addr)
	rc := fleettest.Client(addr)
	defer func() { _ = rc.Close() }()
	f, err := Open("redis://"+addr, WithPrefix(prefix), WithReplicaID("bench"))
	if err != nil {
		b.Fatal(err)
	}
	f.Start(context.Background())
	defer func() { _ = f.Close(context.Background()) }()
	bud := f.Budget("up", newFakeLocal()).(*budget)
	d := batcher.Demand{Requests: 1, Tokens: 300, RPM: rpm(1e9, 1e6), TPM: rpm(1e12, 1e9), MaxConcurrency: 1 << 20}
	ping := make([]time.Duration, 0, b.N)
	acq := make([]time.Duration, 0, b.N)
	rel := make([]time.Duration, 0, b.N)
	before := f.Counters()
	b.ResetTimer()
	for range b.N {
		// The baseline in the same moment: a bare PING's round trip.
		t0 := time.Now()
		if err := rc.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		tk, err := bud.Acquire(context.Background(), d)
		t2 := time.Now()
		if err != nil || !tk.Shared {
			b.Fatalf("Acquire: %+v, %v", tk, err)
		}
		tk.Release(batcher.Outcome{Called: true, Requests: 1, Tokens: 200, Succeeded: true})
		ping, acq, rel = append(ping, t1.Sub(t0)), append(acq, t2.Sub(t1)), append(rel, time.Since(t2))
	}
	b.StopTimer()
	after := f.Counters()
	b.ReportMetric(quantileµs(ping, 0.5), "ping-p50-µs")
	b.ReportMetric(quantileµs(ping, 0.99), "ping-p99-µs")
	b.ReportMetric(quantileµs(acq, 0.5), "acquire-p50-µs")
	b.ReportMetric(quantileµs(acq, 0.99), "acquire-p99-µs")
	b.ReportMetric(quantileµs(rel, 0.99), "release-p99-µs")
	trips := (after.Acquires - before.Acquires) + (after.Releases - before.Releases)
	b.ReportMetric(float64(trips)/float64(after.Batches-before.Batches), "round-trips/batch")
}

func quantileµs(s []time.Duration, p float64) float64 {
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))].Microseconds())
}
