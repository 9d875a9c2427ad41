package jobs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cache"
	"github.com/batcherhq/batcher/jobs"
)

// embedCounter answers embeddings at once and counts the items it is sent.
type embedCounter struct{ items atomic.Int64 }

func (f *embedCounter) Dispatch(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	f.items.Add(int64(len(b.Requests)))
	for i, r := range b.Requests {
		out[i] = batcher.Response{Embedding: []float32{float32(len(r.Input.Text)), 1}, Usage: batcher.Usage{PromptTokens: 2}}
	}
	return nil
}

// TestJobItemsUseTheCache: a job's items go through the response cache as
// any request does. A job of n embedding items of which half repeat the
// other half sends at most n/2 (+1) upstream, and the same job run again
// sends none. 200 items, all in flight at once (ConcurrentRequests 512),
// put repeats in flight beside their first as 1,000 did, in a fifth of
// the time (about 40 ms an item under -race on a loaded machine).
func TestJobItemsUseTheCache(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 100
	}
	be := &embedCounter{}
	rc, err := cache.New()
	if err != nil {
		t.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithCache(rc),
		batcher.WithQueueCapacity(10_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be, MaxConcurrency: 8}),
		batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "be",
			Batch: batcher.BatchConfig{MaxBatchSize: 64, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close(context.Background()) }) // after envOn's, which runs first
	e := envOn(t, core)
	m := e.m
	run := func() int64 {
		t.Helper()
		before := be.items.Load()
		ctx := t.Context()
		c, err := m.Begin(ctx, jobs.Spec{Model: "embed", ConcurrentRequests: 512})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			item := &jobs.ItemRequest{Input: batcher.Input{Op: batcher.OpEmbedding, Text: fmt.Sprintf("chunk %d", (i*7919)%(n/2))}}
			if err := c.Add(ctx, fmt.Sprintf("c%d", i), item); err != nil {
				t.Fatal(err)
			}
		}
		j, err := c.Finish(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := e.wait(t, j.ID)
		if p.State != jobs.StateCompleted || p.Counts.Succeeded != int64(n) {
			t.Fatalf("job ended %s with %+v, want %d succeeded", p.State, p.Counts, n)
		}
		return be.items.Load() - before
	}
	first := run()
	t.Logf("first run: %d items, %d upstream", n, first)
	if first > int64(n/2)+1 {
		t.Fatalf("first run: %d items upstream for %d distinct inputs, want at most %d", first, n/2, n/2+1)
	}
	if second := run(); second != 0 {
		t.Fatalf("second run: %d items upstream, want none", second)
	}
	var hits int64
	for _, s := range rc.Stats() {
		hits += s.Hits[0]
	}
	if hits < int64(n)+int64(n/2)-first {
		t.Fatalf("%d cache hits over both runs, want at least %d", hits, int64(n)+int64(n/2)-first)
	}
}
