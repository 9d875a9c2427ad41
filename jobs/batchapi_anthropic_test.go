package jobs_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// newAnthropicBatchEnv is newBatchEnv with an anthropic backend: online
// calls to llmsim's /v1/messages, upstream batches to its Message Batches
// (no file API, no tags).
func newAnthropicBatchEnv(t *testing.T, cfg llmsim.Config) *batchEnv {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	be, err := anthropic.New(anthropic.Config{BaseURL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithQueueCapacity(100_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "llmsim", Backend: be, MaxConcurrency: 8}),
		batcher.WithRoute(batcher.Route{Name: "chat", Model: "sim-chat", Op: batcher.OpChat, Backend: "llmsim",
			Batch: batcher.BatchConfig{MaxBatchSize: 50, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &batchEnv{sim: sim, core: core, up: be.Batches(), store: openSQLite(t, dir), dir: dir}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := core.Shutdown(ctx); err != nil {
			t.Errorf("core shutdown: %v", err)
		}
		_ = be.Close()
		sim.Close()
		ts.Close()
	})
	return e
}

// TestBatchAPIAnthropic: a job through Anthropic's Message Batches, with
// 2% errored and 2% expired lines, ends with every custom id exactly once,
// every line answered upstream (the unanswered ones in new batches).
func TestBatchAPIAnthropic(t *testing.T) {
	e := newAnthropicBatchEnv(t, llmsim.Config{BatchTime: 30 * time.Millisecond, BatchFailRate: 0.02, BatchExpireRate: 0.02, Seed: 11})
	m, _ := e.manager(t, nil)
	const n = 300
	j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
	p := waitJob(t, m, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("ended %s %+v", p.State, p.Counts)
	}
	if errs := exactlyOnce(t, m, j, n); errs != 0 {
		t.Errorf("%d error lines, want 0", errs)
	}
	if mb := e.sim.BatchStats().MessageBatches; mb <= n/100 {
		t.Errorf("%d message batches, want more than %d (the unanswered lines again)", mb, n/100)
	}
	if res := readLines(t, m.Dir(j)+"/results.jsonl"); res[0].Dispatch != jobs.DispatchBatchAPI {
		t.Errorf("result dispatch %q, want batch_api", res[0].Dispatch)
	}
}

// TestBatchAPIAnthropicResume kills the dispatch before its create call,
// right after it (the batch exists, its id not recorded) and while it
// polls, and resumes it in a new manager: no item lost, and no message
// batch created twice. Message Batches carry no tags: the new manager
// tells a batch it did not record by when it was created and its size.
func TestBatchAPIAnthropicResume(t *testing.T) {
	for _, step := range []string{"claimed", "created", "polling"} {
		t.Run(step, func(t *testing.T) {
			e := newAnthropicBatchEnv(t, llmsim.Config{BatchTime: 30 * time.Millisecond, Seed: 9})
			var killed atomic.Bool
			// unrecorded counts the chunks whose batch the kill caught
			// made but not recorded.
			var unrecorded atomic.Int64
			hit := make(chan struct{})
			var once sync.Once
			m, stop := e.manager(t, func(_ string, chunk int, s string) bool {
				if killed.Load() {
					if s == "created" {
						unrecorded.Add(1)
					}
					return true
				}
				if s == step && chunk == 1 {
					killed.Store(true)
					if s == "created" {
						unrecorded.Add(1)
					}
					once.Do(func() { close(hit) })
					return true
				}
				return false
			})
			const n = 300
			j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
			select {
			case <-hit:
			case <-time.After(time.Minute):
				t.Fatal("the dispatch never reached the step")
			}
			stop()
			m2, _ := e.manager(t, nil)
			p := waitJob(t, m2, j.ID)
			if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
				t.Fatalf("ended %s %+v", p.State, p.Counts)
			}
			exactlyOnce(t, m2, j, n)
			if mb := e.sim.BatchStats().MessageBatches; mb != 3 {
				t.Errorf("%d message batches, want 3 (%d made and not recorded before the kill)", mb, unrecorded.Load())
			}
			if step == "created" && unrecorded.Load() == 0 {
				t.Error("the kill caught no batch made and not recorded")
			}
		})
	}
}
