package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
	"github.com/batcherhq/batcher/llmsim"
)

// batchEnv is llmsim (online and batch API), a core whose route "chat"
// goes to it, and a store; managers come and go over the same store, as
// processes do across a kill.
type batchEnv struct {
	sim   *llmsim.Server
	core  *batcher.Batcher
	up    batchapi.Upstream
	store jobs.Store
	dir   string
	pg    bool
	dsn   string // PostgreSQL: each manager opens its own store, as a process would
	// prices and mp, when set, are the managers' Prices and MeterProvider.
	prices map[string]jobs.Price
	mp     metric.MeterProvider
	// route, when set, changes the managers' batch route.
	route func(*jobs.BatchRoute)
}

func newBatchEnv(t *testing.T, store func(t *testing.T, dir string) jobs.Store, cfg llmsim.Config) *batchEnv {
	return newBatchEnvWrapped(t, store, cfg, nil)
}

// newBatchEnvWrapped is newBatchEnv with llmsim behind wrap (faults).
func newBatchEnvWrapped(t *testing.T, store func(t *testing.T, dir string) jobs.Store, cfg llmsim.Config, wrap func(http.Handler) http.Handler) *batchEnv {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(sim)
	}
	ts := httptest.NewServer(h)
	be, err := openai.New(openai.Config{BaseURL: ts.URL + "/v1"})
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
	e := &batchEnv{sim: sim, core: core, up: be.Batches(), store: store(t, dir), dir: dir}
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

// manager starts a manager over the env's store; hook, when set, is its
// BatchHook. stop shuts it down (what a kill leaves: claims go back).
func (e *batchEnv) manager(t *testing.T, hook func(string, int, string) bool) (m *jobs.Manager, stop func()) {
	t.Helper()
	store := e.store
	if e.pg {
		if e.dsn == "" {
			e.dsn = storetest.PostgresSchema(t)
		}
		s, err := jobs.OpenPostgres(t.Context(), e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		store = s
	}
	br := jobs.BatchRoute{Upstream: e.up, Model: "sim-chat", MaxRequests: 100,
		PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond, CreateTimeout: 2 * time.Second}
	if e.route != nil {
		e.route(&br)
	}
	m = started(t, jobs.Config{Store: store, Core: e.core, DataDir: e.dir, Exclusive: !e.pg,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		BatchRoutes: map[string]jobs.BatchRoute{"chat": br},
		BatchHook:   hook, Prices: e.prices, MeterProvider: e.mp})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m.Shutdown(ctx); err != nil {
				t.Errorf("manager shutdown: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return m, stop
}

func createChat(t *testing.T, m *jobs.Manager, spec jobs.Spec, n int) *jobs.Job {
	t.Helper()
	ctx := t.Context()
	c, err := m.Begin(ctx, spec)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	for i := range n {
		if err := c.Add(ctx, fmt.Sprintf("c%d", i), chatItem(fmt.Sprintf("item %d says hello", i))); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return j
}

func waitJob(t *testing.T, m *jobs.Manager, id string) jobs.Progress {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var last jobs.Progress
	if err := m.Watch(ctx, id, 20*time.Millisecond, func(p jobs.Progress) error { last = p; return nil }); err != nil {
		t.Fatalf("Watch: %v (last %+v)", err, last)
	}
	return last
}

// exactlyOnce checks that the job's files hold each of its n custom ids
// exactly once across results and errors, and returns how many errors.
func exactlyOnce(t *testing.T, m *jobs.Manager, j *jobs.Job, n int) int {
	t.Helper()
	seen := map[string]int{}
	dir := m.Dir(j)
	res := readLines(t, filepath.Join(dir, "results.jsonl"))
	var errs []outLine
	if _, err := os.Stat(filepath.Join(dir, "errors.jsonl")); err == nil {
		errs = readLines(t, filepath.Join(dir, "errors.jsonl"))
	}
	for _, l := range append(res, errs...) {
		seen[l.CustomID]++
	}
	for i := range n {
		if c := seen[fmt.Sprintf("c%d", i)]; c != 1 {
			t.Errorf("c%d: %d lines, want 1", i, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d custom ids in the files, want %d", len(seen), n)
	}
	return len(errs)
}

// noneTwice checks llmsim saw no file uploaded twice and no batch created
// twice, and returns how many of each.
func (e *batchEnv) noneTwice(t *testing.T) (files, batches int) {
	t.Helper()
	st := e.sim.BatchStats()
	for name, n := range st.FileNames {
		if n != 1 {
			t.Errorf("file %s uploaded %d times", name, n)
		}
	}
	for tags, n := range st.Tags {
		if n != 1 {
			t.Errorf("batch %s created %d times", tags, n)
		}
	}
	return len(st.FileNames), len(st.Tags)
}

var batchStores = []struct {
	name string
	open func(t *testing.T, dir string) jobs.Store
	pg   bool
}{
	{"sqlite", openSQLite, false},
	{"postgres", func(*testing.T, string) jobs.Store { return nil }, true}, // opened per manager
}

// TestBatchAPIDispatch: a job through the batch API, with 1% failed and 1%
// expired lines upstream, ends with every custom id exactly once. Without
// a deadline the lines the upstream did not answer go to new upstream
// batches (nothing runs online); with a deadline shorter than the
// provider's 24 hours they run online.
func TestBatchAPIDispatch(t *testing.T) {
	for _, st := range batchStores {
		for _, window := range []time.Duration{0, time.Hour} {
			t.Run(fmt.Sprintf("%s/window=%v", st.name, window), func(t *testing.T) {
				e := newBatchEnv(t, st.open, llmsim.Config{BatchTime: 50 * time.Millisecond, BatchFailRate: 0.01, BatchExpireRate: 0.01, Seed: 7})
				e.pg = st.pg
				m, _ := e.manager(t, nil)
				const n = 500
				j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI, CompletionWindow: window}, n)
				p := waitJob(t, m, j.ID)
				if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
					t.Fatalf("ended %s %+v", p.State, p.Counts)
				}
				if errs := exactlyOnce(t, m, j, n); errs != 0 {
					t.Errorf("%d error lines, want 0 (tried again)", errs)
				}
				files, batches := e.noneTwice(t)
				online := e.sim.Stats().Chat - e.sim.BatchStats().Answered
				if window == 0 {
					// Each line fails upstream with p 0.02: after three
					// batches, about 500 * 0.02^3 = 0.004 lines run online.
					if files <= n/100 || batches != files || online > 1 {
						t.Errorf("%d files, %d batches upstream and %d online calls; want more than %d batches, each line again upstream", files, batches, online, n/100)
					}
					return
				}
				if files != n/100 || batches != n/100 {
					t.Errorf("%d files and %d batches upstream, want %d each", files, batches, n/100)
				}
				if online == 0 || online > n/5 {
					t.Errorf("%d online calls; want the failed and expired lines only", online)
				}
			})
		}
	}
}

// TestBatchAPIResume kills the dispatch at each step and resumes it in a
// new manager over the same store: no file uploaded twice, no batch
// created twice, no item lost.
func TestBatchAPIResume(t *testing.T) {
	for _, st := range batchStores {
		for _, step := range []string{"claimed", "uploading", "uploaded", "created", "polling", "collected"} {
			t.Run(st.name+"/"+step, func(t *testing.T) {
				e := newBatchEnv(t, st.open, llmsim.Config{BatchTime: 30 * time.Millisecond, Seed: 9})
				e.pg = st.pg
				var killed atomic.Bool
				hit := make(chan struct{})
				var once sync.Once
				m, stop := e.manager(t, func(_ string, chunk int, s string) bool {
					if killed.Load() {
						return true
					}
					if s == step && chunk == 1 {
						killed.Store(true)
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
				files, batches := e.noneTwice(t)
				if files != 3 || batches != 3 {
					t.Errorf("%d files and %d batches upstream, want 3 each", files, batches)
				}
			})
		}
	}
}
