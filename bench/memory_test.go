package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// The memory target: what one queued request costs on the heap beyond its
// prompt, with queuedRequests queued.
const (
	queuedRequests   = 1_000_000
	promptBytes      = 256
	maxOverheadBytes = 1024
)

// TestMemoryPerQueuedRequest checks the memory target. It queues a million
// requests, so it runs only when BENCH_MEMORY=1 and -short is not set.
func TestMemoryPerQueuedRequest(t *testing.T) {
	if testing.Short() || os.Getenv("BENCH_MEMORY") != "1" {
		t.Skip("heavy: set BENCH_MEMORY=1 and leave out -short to run")
	}
	per := queuedOverhead(t, queuedRequests)
	t.Logf("%.0f heap bytes per queued request beyond its %d-byte prompt", per, promptBytes)
	if per >= maxOverheadBytes {
		t.Errorf("queued request overhead %.0f bytes, want under %d", per, maxOverheadBytes)
	}
}

// BenchmarkQueuedMemory reports the heap bytes per queued request beyond its
// prompt, as B/queued-req. One op queues a million requests and drains them;
// its time is the whole cycle and is not a figure of interest.
func BenchmarkQueuedMemory(b *testing.B) {
	var sum float64
	for range b.N {
		sum += queuedOverhead(b, queuedRequests)
	}
	b.ReportMetric(sum/float64(b.N), "B/queued-req")
}

// queuedOverhead queues n requests with distinct prompts behind a backend
// that holds its one dispatch slot, and returns the heap growth per request
// less the prompt. The growth counts everything a caller of the core pays
// for a queued request: the Request, its Call and the lane's bookkeeping.
// The first batch (at most maxBatch requests) is in flight, not queued; it is
// counted the same way.
func queuedOverhead(tb testing.TB, n int) float64 {
	tb.Helper()
	hold := make(chan struct{})
	started := make(chan struct{}, 1)
	be := batcher.BackendFunc(func(ctx context.Context, _ *batcher.Batch, out []batcher.Response) error {
		select {
		case started <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
		for i := range out {
			out[i].Text = "ok"
		}
		return nil
	})
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "held", Backend: be, MaxConcurrency: 1}),
		batcher.WithRoute(batcher.Route{
			Name:    "m",
			Op:      batcher.OpCompletion,
			Backend: "held",
			Batch:   batcher.BatchConfig{MaxBatchSize: maxBatch, Window: time.Hour, MaxWait: time.Hour},
		}),
		batcher.WithQueueCapacity(2*n),
		batcher.WithQueueTimeout(time.Hour),
	)
	if err != nil {
		tb.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(hold)
			shutdown(tb, core)
		}
	}()

	// The benchmark's own bookkeeping is allocated before the baseline.
	calls := make([]*batcher.Call, n)
	buf := make([]byte, promptBytes)
	for i := range buf {
		buf[i] = 'x'
	}
	ctx := context.Background()

	before := heapAlloc()
	for i := range calls {
		strconv.AppendInt(buf[:0], int64(i), 10) // distinct prompt, same length
		req := &batcher.Request{
			Route:    "m",
			Priority: batcher.PriorityNormal,
			Input:    batcher.Input{Op: batcher.OpCompletion, Prompt: string(buf)},
		}
		c, err := core.Submit(ctx, req)
		if err != nil {
			tb.Fatalf("submit %d: %v", i, err)
		}
		calls[i] = c
	}
	<-started
	after := heapAlloc()
	if p := core.Pending(); p != n {
		tb.Fatalf("pending %d, want %d", p, n)
	}
	per := float64(int64(after)-int64(before))/float64(n) - promptBytes

	// Shutdown sends the partial batch left at the end at once; the route's
	// hour-long window would hold it otherwise.
	close(hold)
	released = true
	shutdown(tb, core)
	for i, c := range calls {
		select {
		case <-c.Done():
		default:
			tb.Fatalf("request %d of %d has no result after Shutdown; pending %d", i, n, core.Pending())
		}
		if r := c.Result(); r.Err != nil || r.Text != "ok" {
			tb.Fatalf("request %d: result %q, err %v", i, r.Text, r.Err)
		}
	}
	runtime.KeepAlive(calls)
	return per
}

// heapAlloc returns the live heap after a full collection.
func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Sanity check for the helper itself, cheap enough for every run.
func TestQueuedOverheadSmall(t *testing.T) {
	per := queuedOverhead(t, 10_000)
	if per <= 0 || per > 1<<20 {
		t.Fatalf("overhead %v bytes per request: implausible", per)
	}
	t.Logf("%.0f bytes per queued request (10k queued)", per)
}

// BenchmarkIdleLaneMemory reports what an idle lane costs (heap plus its
// owner goroutine's stack) as B/idle-lane: 10,000 lanes, each with one
// request answered, kept open by a long idle timeout.
func BenchmarkIdleLaneMemory(b *testing.B) {
	const lanes = 10_000
	var sum float64
	for range b.N {
		be := batcher.BackendFunc(func(_ context.Context, _ *batcher.Batch, out []batcher.Response) error {
			for i := range out {
				out[i].Text = "ok"
			}
			return nil
		})
		core, err := batcher.New(
			batcher.WithBackend(batcher.BackendConfig{Name: "noop", Backend: be}),
			batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "noop",
				Batch: batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
			batcher.WithMaxLanes(lanes),
			batcher.WithIdleLaneTimeout(time.Hour),
		)
		if err != nil {
			b.Fatal(err)
		}
		// Warm the backend's workers and the pools first.
		if _, err := core.Do(context.Background(), &batcher.Request{Route: "m", Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "x"}}); err != nil {
			b.Fatal(err)
		}
		before := memNow()
		for i := range lanes - 1 {
			r := &batcher.Request{Route: "m", Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "x"}, Params: batcher.Params{MaxTokens: int32(2 + i)}}
			if _, err := core.Do(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
		after := memNow()
		sum += float64(after-before) / float64(lanes-1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := core.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	b.ReportMetric(sum/float64(b.N), "B/idle-lane")
}

// memNow returns the heap in use plus goroutine stacks, after a GC.
func memNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
