package jobs

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// holdBackend holds every call until open is closed; full is closed once
// it holds want items at once.
type holdBackend struct {
	open, full chan struct{}
	want       int64
	held       atomic.Int64
	once       sync.Once
}

func (b *holdBackend) Dispatch(ctx context.Context, bt *batcher.Batch, out []batcher.Response) error {
	if b.held.Add(int64(len(bt.Requests))) >= b.want {
		b.once.Do(func() { close(b.full) })
	}
	defer b.held.Add(-int64(len(bt.Requests)))
	select {
	case <-b.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	for i := range bt.Requests {
		out[i] = batcher.Response{Text: "ok", Usage: batcher.Usage{PromptTokens: 1, CompletionTokens: 1}}
	}
	return nil
}

// A job with 1,024 tasks in flight does not hold a goroutine for each:
// the core hands each result to the run's loop by callback. (1,024 tells
// a goroutine a task from a fixed few as well as 4,096, the default
// MaxInFlight, does, in a quarter of the time under the race detector.)
//
// A run's window starts at a batch and grows by a task per result; this
// run's starts at n, so that n tasks are in flight at once without 2n
// results first.
func TestInFlightTasksHoldNoGoroutineEach(t *testing.T) {
	const n = 1024
	be := &holdBackend{open: make(chan struct{}), full: make(chan struct{}), want: n}
	// Full batches only (16 calls of 64), however slowly the run submits
	// (the race detector on a loaded machine), and a request's life longer
	// than that takes.
	core, err := batcher.New(
		batcher.WithQueueCapacity(2*n),
		batcher.WithQueueTimeout(10*time.Minute),
		batcher.WithBackend(batcher.BackendConfig{Name: "hold", Backend: be, MaxConcurrency: n / 64, AttemptTimeout: 10 * time.Minute}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "hold",
			Batch: batcher.BatchConfig{MaxBatchSize: 64, MinBatchSize: 64, Window: time.Millisecond, MaxWait: 5 * time.Minute}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	dir := t.TempDir()
	store, err := OpenSQLite(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	m, err := New(Config{Store: store, Core: core, DataDir: dir, Exclusive: true, MaxInFlight: n, QueueTarget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var openOnce sync.Once
	release := func() { openOnce.Do(func() { close(be.open) }) }
	t.Cleanup(func() {
		release()
		ShutdownForTest(t, m, core)
	})
	c, err := m.Begin(ctx, Spec{Model: "chat", ConcurrentRequests: n})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		in := batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "item " + strconv.Itoa(i)}}}
		if err := c.Add(ctx, "", &ItemRequest{Input: in}); err != nil {
			t.Fatal(err)
		}
	}
	// The run is this test's, registered before the job is queued, so
	// that the manager's scheduler leaves the job to it.
	r := newRun(m, c.job)
	r.win = n
	m.mu.Lock()
	m.runs[r.id] = r
	m.wg.Add(1)
	m.mu.Unlock()
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g0 := runtime.NumGoroutine()
	go r.loop()
	select {
	case <-be.full:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the backend never held %d items at once (%d)", n, be.held.Load())
	}
	g := runtime.NumGoroutine()
	t.Logf("%d tasks in flight: %d goroutines, %d before the run", n, g, g0)
	// The backend's 16 calls, the core's owners and timers: about a
	// hundred, whatever the tasks in flight; a goroutine a task would be
	// over a thousand.
	if g-g0 > 300 {
		t.Errorf("%d goroutines more than before the run with %d tasks in flight", g-g0, n)
	}
	release()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last Progress
	if err := m.Watch(wctx, j.ID, 50*time.Millisecond, func(p Progress) error { last = p; return nil }); err != nil {
		t.Fatal(err)
	}
	if last.State != StateCompleted || last.Counts.Succeeded != n {
		t.Fatalf("progress %+v", last)
	}
}
