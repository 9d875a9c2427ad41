package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/cputime"
	"github.com/batcherhq/batcher/telemetry"
	"github.com/graph-gophers/dataloader/v7"
	"github.com/vikstrous/dataloadgen"
)

// The shared shape of every core benchmark: batches of at most maxBatch,
// cut after window at the latest.
const (
	maxBatch = 100
	window   = time.Millisecond
)

// producerCounts are the numbers of producer goroutines, each awaiting its
// result before it submits again.
var producerCounts = []int{1, 8, 64, 512}

// batchCounter counts what a backend saw, for the items/batch metric.
type batchCounter struct {
	batches atomic.Int64
	items   atomic.Int64
}

func (c *batchCounter) add(n int) {
	c.batches.Add(1)
	c.items.Add(int64(n))
}

// report adds the throughput and the mean batch size to b's results.
func (c *batchCounter) report(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "items/s")
	}
	if n := c.batches.Load(); n > 0 {
		b.ReportMetric(float64(c.items.Load())/float64(n), "items/batch")
	}
}

// share returns how many of n items producer i of p handles.
func share(n, p, i int) int {
	k := n / p
	if i < n%p {
		k++
	}
	return k
}

// runProducers starts p producers, gives producer i its share of b.N items
// and times them from the first submission to the last result. do submits
// item j of producer i and awaits its result.
func runProducers(b *testing.B, p int, do func(i, j int) error) {
	b.Helper()
	b.ReportAllocs()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errMu sync.Mutex
		first error
	)
	for i := range p {
		n := share(b.N, p, i)
		wg.Go(func() {
			<-start
			for j := range n {
				if err := do(i, j); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	before := crossCoreRoundTrip()
	b.ResetTimer()
	cpu := cputime.Process()
	wait := mutexWait()
	sw := voluntarySwitches()
	close(start)
	wg.Wait()
	b.StopTimer()
	if first != nil {
		b.Fatal(first)
	}
	if d := b.Elapsed(); d > 0 {
		used := cputime.Process() - cpu
		b.ReportMetric(float64(used)/float64(d), "cores")
		b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/item")
		b.ReportMetric(float64(mutexWait()-wait)/float64(b.N), "mutex-wait-ns/item")
		b.ReportMetric(float64(voluntarySwitches()-sw)/float64(b.N), "sleeps/item")
		b.ReportMetric(max(before, crossCoreRoundTrip()), "xcore-ns")
	}
}

// crossCoreRoundTrip returns the mean time, in ns, for a cache line to go
// from one P to the other and back (two goroutines taking turns at an
// atomic counter), 20,000 turns. On this project's VMs it is bimodal, about
// 55 ns in some spells and 320 ns in others, as the host places the two
// vCPUs; every handoff between producers and a lane's owner pays it, so
// BenchmarkCore's CPU an item at 512 producers doubles in the slow spells
// (peers less so) without any change of code. Reported as xcore-ns (the
// worse of before and after a run), so that a round can be read against
// the machine's state; 0 with fewer than two Ps.
func crossCoreRoundTrip() float64 {
	if runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	const turns = 20_000
	var x atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i < 2*turns; i += 2 {
			for x.Load() != i {
			}
			x.Store(i + 1)
		}
	}()
	start := time.Now()
	for i := int64(0); i < 2*turns; i += 2 {
		for x.Load() != i {
		}
		x.Store(i + 1)
	}
	<-done
	return float64(time.Since(start).Nanoseconds()) / turns
}

// voluntarySwitches returns how many times the process's threads have
// given up their core so far (getrusage's ru_nvcsw): for the Go runtime,
// a thread that found no goroutine to run going to sleep on a futex (or
// the network poller), which another wakes again when it readies one.
// Per item, it tells a run whose second P keeps going idle between
// bursts of work from one that keeps both busy; the machine's load adds
// involuntary switches, not these.
func voluntarySwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw
}

// mutexWait returns the time goroutines have spent blocked on a
// sync.Mutex, sync.RWMutex or runtime lock so far (runtime/metrics):
// producers that queue on a shared lock show here as a wait an item, a
// count that, unlike the rates, a busy machine does not make up.
func mutexWait() time.Duration {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * 1e9)
}

// BenchmarkCore drives Batcher and two peer batch libraries the same way:
// producers that each submit one item and await its result, a backend that
// does no work, batches of at most 100 and a 1 ms window. One op is one
// item. Batcher records its metrics as batcherd does (benchBatcherMin);
// the peers have none.
func BenchmarkCore(b *testing.B) {
	libs := []struct {
		name string
		run  func(b *testing.B, producers int)
	}{
		{"batcher", benchBatcher},
		// The peers' trigger policy: a batch leaves full or after the
		// window, never early (MinBatchSize = MaxBatchSize).
		{"batcher-full", benchBatcherFull},
		{"dataloadgen", benchDataloadgen},
		{"dataloader", benchDataloader},
	}
	for _, lib := range libs {
		b.Run(lib.name, func(b *testing.B) {
			for _, p := range producerCounts {
				b.Run(fmt.Sprintf("producers=%d", p), func(b *testing.B) { lib.run(b, p) })
			}
		})
	}
}

// newNoopCore returns a core with one completion route "m" whose backend
// answers every request at once, with the extra options.
func newNoopCore(tb testing.TB, cnt *batchCounter, extra ...batcher.Option) *batcher.Batcher {
	return newNoopCoreMin(tb, cnt, 0, extra...)
}

// newNoopCoreMin is newNoopCore with the route's MinBatchSize (0: default).
func newNoopCoreMin(tb testing.TB, cnt *batchCounter, minBatch int, extra ...batcher.Option) *batcher.Batcher {
	tb.Helper()
	be := batcher.BackendFunc(func(_ context.Context, bt *batcher.Batch, out []batcher.Response) error {
		cnt.add(len(bt.Requests))
		for i := range out {
			out[i].Text = "ok"
		}
		return nil
	})
	opts := []batcher.Option{
		batcher.WithBackend(batcher.BackendConfig{Name: "noop", Backend: be}),
		batcher.WithRoute(batcher.Route{
			Name:    "m",
			Op:      batcher.OpCompletion,
			Backend: "noop",
			Batch:   batcher.BatchConfig{MaxBatchSize: maxBatch, MinBatchSize: minBatch, Window: window},
		}),
		batcher.WithQueueCapacity(1 << 20),
	}
	core, err := batcher.New(append(opts, extra...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return core
}

func shutdown(tb testing.TB, core *batcher.Batcher) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := core.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
}

func benchBatcher(b *testing.B, p int) { benchBatcherMin(b, p, 0) }

func benchBatcherFull(b *testing.B, p int) { benchBatcherMin(b, p, maxBatch) }

// benchBatcherMin runs the core as batcherd does, with its metrics:
// telemetry.Setup's MeterProvider and producer (the Prometheus reader
// batcherd always has), so that the figures include what recording costs.
func benchBatcherMin(b *testing.B, p, minBatch int) {
	var cnt batchCounter
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	core := newNoopCoreMin(b, &cnt, minBatch, tel.CoreOptions()...)
	defer shutdown(b, core)
	reqs := make([]batcher.Request, p)
	for i := range reqs {
		reqs[i] = batcher.Request{
			ID:    fmt.Sprintf("p%d", i),
			Route: "m",
			// The zero Priority is PriorityUrgent, which never waits for
			// batch-mates; the service maps PRIORITY_UNSPECIFIED to normal.
			Priority: batcher.PriorityNormal,
			Input:    batcher.Input{Op: batcher.OpCompletion, Prompt: "hello"},
		}
	}
	ctx := context.Background()
	runProducers(b, p, func(i, _ int) error {
		res, err := core.Do(ctx, &reqs[i])
		if err == nil && res.Text != "ok" {
			err = fmt.Errorf("result text %q, want %q", res.Text, "ok")
		}
		return err
	})
	cnt.report(b)
}

// key makes every item's key distinct, so that no peer can merge two items
// into one.
func key(i, j int) uint64 { return uint64(i)<<40 | uint64(j) }

func benchDataloadgen(b *testing.B, p int) {
	var cnt batchCounter
	fetch := func(_ context.Context, keys []uint64) ([]string, []error) {
		cnt.add(len(keys))
		out := make([]string, len(keys))
		for i := range out {
			out[i] = "ok"
		}
		return out, nil
	}
	l := dataloadgen.NewLoader(fetch,
		dataloadgen.WithBatchCapacity(maxBatch),
		dataloadgen.WithWait(window),
		dataloadgen.WithoutCache(),
	)
	ctx := context.Background()
	runProducers(b, p, func(i, j int) error {
		v, err := l.Load(ctx, key(i, j))
		if err == nil && v != "ok" {
			err = fmt.Errorf("value %q, want %q", v, "ok")
		}
		return err
	})
	cnt.report(b)
}

func benchDataloader(b *testing.B, p int) {
	var cnt batchCounter
	batchFn := func(_ context.Context, keys []uint64) []*dataloader.Result[string] {
		cnt.add(len(keys))
		out := make([]*dataloader.Result[string], len(keys))
		for i := range out {
			out[i] = &dataloader.Result[string]{Data: "ok"}
		}
		return out
	}
	l := dataloader.NewBatchedLoader(batchFn,
		dataloader.WithBatchCapacity[uint64, string](maxBatch),
		dataloader.WithWait[uint64, string](window),
		dataloader.WithCache[uint64, string](&dataloader.NoCache[uint64, string]{}),
	)
	ctx := context.Background()
	runProducers(b, p, func(i, j int) error {
		v, err := l.Load(ctx, key(i, j))()
		if err == nil && v != "ok" {
			err = fmt.Errorf("value %q, want %q", v, "ok")
		}
		return err
	})
	cnt.report(b)
}
