package batcher

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestTallyMatchesRecord: measurements tallied for a batch and then
// flushed leave a series' histogram as recording each at once does, in
// every bucket, in any order, and for more series than a run tallies.
func TestTallyMatchesRecord(t *testing.T) {
	direct, _ := histogramCore(t, true)
	tallied, _ := histogramCore(t, true)
	var values []time.Duration
	for _, s := range secondsBuckets {
		d := time.Duration(s * float64(time.Second))
		values = append(values, d, d+1, d-1)
	}
	values = append(values, 0, 1, time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	var ts tallies
	for range 3 { // three batches
		rng.Shuffle(len(values), func(i, j int) { values[i], values[j] = values[j], values[i] })
		for i, v := range values {
			// Ten series in turn, beyond the maxTallies a run keeps.
			p, o := Priority(i%numPriorities), i/numPriorities%2
			(*direct.routes.Load())["m"].metrics.durations[p][o].seconds(v)
			ts.record(&(*tallied.routes.Load())["m"].metrics.durations[p][o], v)
		}
		ts.flush()
	}
	for p := range numPriorities {
		for o := range 2 {
			want := (*direct.routes.Load())["m"].metrics.durations[p][o].h.Load()
			got := (*tallied.routes.Load())["m"].metrics.durations[p][o].h.Load()
			if got == nil {
				t.Fatalf("priority %d outcome %d: nothing recorded", p, o)
			}
			if g, w := fmt.Sprint(got.snapshot()), fmt.Sprint(want.snapshot()); g != w {
				t.Errorf("priority %d outcome %d: buckets %s, want %s", p, o, g, w)
			}
			if g, w := fmt.Sprint(got.ints()), fmt.Sprint(want.ints()); g != w {
				t.Errorf("priority %d outcome %d: sum, min, max %s, want %s", p, o, g, w)
			}
		}
	}
}

// TestBatchMetricsBeforeAnyWakes: the histograms a batch run tallies for
// its calls are in their series before it wakes the first caller, who so
// finds the whole batch's durations recorded. The hook reads the series at
// the instant of the wake-up, on the run's goroutine: a run that added its
// tallies after waking its callers fails here every time, not only when a
// woken caller happens to run first.
func TestBatchMetricsBeforeAnyWakes(t *testing.T) {
	be := &fakeBackend{hold: make(chan struct{})}
	b, reader := histogramCoreOn(t, true, be, BatchConfig{MaxBatchSize: 8, MinBatchSize: 8, Window: time.Hour, MaxWait: time.Hour})
	series := &(*b.routes.Load())["m"].metrics.durations[PriorityNormal][outcomeOK]
	atWake := make(chan int64, 1)
	b.testHookWake = func() { atWake <- series.count() }
	done := make(chan int64, 8)
	for i := range 8 {
		c := submit(t, b, req(fmt.Sprint(i), PriorityNormal))
		go func() {
			<-c.Done()
			done <- series.count()
		}()
	}
	close(be.hold)
	if n := <-atWake; n != 8 {
		t.Errorf("the run woke its callers with %d of the batch's 8 durations recorded", n)
	}
	for range 8 {
		if n := <-done; n != 8 {
			t.Errorf("a caller woke with %d of its batch's 8 durations recorded", n)
		}
	}
	var n uint64
	if h, ok := collect(t, reader)[histDuration.name].Data.(metricdata.Histogram[float64]); ok {
		for _, dp := range h.DataPoints {
			n += dp.Count
		}
	}
	if n != 8 {
		t.Errorf("%d durations collected, want 8", n)
	}
}
