package jobs_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// A job of three inputs on the simulated backend, run to its end.
func Example() {
	dir, _ := os.MkdirTemp("", "jobs-example")
	defer func() { _ = os.RemoveAll(dir) }()
	p, _ := sim.New(sim.Config{})
	core, _ := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}}))
	ctx := context.Background()
	store, err := jobs.OpenSQLite(ctx, dir)
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()
	m, _ := jobs.New(jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: true})
	if err := m.Start(ctx); err != nil {
		panic(err)
	}

	c, _ := m.Begin(ctx, jobs.Spec{Name: "greetings", Model: "chat"})
	for _, text := range []string{"hello", "bonjour", "hallo"} {
		_ = c.Add(ctx, text, &jobs.ItemRequest{Input: batcher.Input{Op: batcher.OpChat,
			Messages: []batcher.Message{{Role: "user", Content: text}}}})
	}
	_ = c.AddLine(ctx, []byte(`{"custom_id":"bad","url":"/v1/images","body":{}}`))
	j, _ := c.Finish(ctx)

	var last jobs.Progress
	_ = m.Watch(ctx, j.ID, 0, func(p jobs.Progress) error { last = p; return nil })
	fmt.Println(last.State, last.Counts.Succeeded, last.Counts.Failed)

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = m.Shutdown(sctx)
	_ = core.Shutdown(sctx)
	// Output: completed 3 1
}
