package jobs_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

// TestBatchAPIBudget: the route's enqueued-token budget is llmsim's
// enqueued-token limit, which holds about one upstream batch: the job's
// three batches wait for each other instead of failing
// token_limit_exceeded, and every line is answered upstream.
func TestBatchAPIBudget(t *testing.T) {
	const limit = 10_000
	e := newBatchEnv(t, openSQLite, llmsim.Config{BatchTime: 30 * time.Millisecond, BatchQueueTokens: limit, Seed: 3})
	e.route = func(br *jobs.BatchRoute) { br.MaxEnqueuedTokens = limit }
	m, _ := e.manager(t, nil)
	const n = 300
	ctx := t.Context()
	c, err := m.Begin(ctx, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		it := chatItem(fmt.Sprintf("item %d says hello", i))
		it.Params.MaxTokens = 24
		if err := c.Add(ctx, fmt.Sprintf("c%d", i), it); err != nil {
			t.Fatal(err)
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := waitJob(t, m, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("ended %s %+v", p.State, p.Counts)
	}
	exactlyOnce(t, m, j, n)
	st := e.sim.BatchStats()
	if st.OverQueue != 0 {
		t.Errorf("%d upstream batches failed token_limit_exceeded, want 0", st.OverQueue)
	}
	if st.BatchesCreated < 2 {
		t.Errorf("%d upstream batches, want several (the budget holds about one)", st.BatchesCreated)
	}
	if online := e.sim.Stats().Chat - st.Answered; online != 0 {
		t.Errorf("%d online calls, want 0", online)
	}
}

// TestBatchAPIBudgetNeeded: without the budget the same job overruns
// llmsim's limit (the test above can fail).
func TestBatchAPIBudgetNeeded(t *testing.T) {
	e := newBatchEnv(t, openSQLite, llmsim.Config{BatchTime: 200 * time.Millisecond, BatchQueueTokens: 10_000, Seed: 3})
	m, _ := e.manager(t, nil)
	const n = 300
	j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
	p := waitJob(t, m, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("ended %s %+v", p.State, p.Counts)
	}
	exactlyOnce(t, m, j, n)
	if st := e.sim.BatchStats(); st.OverQueue == 0 {
		t.Errorf("no upstream batch failed token_limit_exceeded without the budget; the budget test proves nothing")
	}
}

// faults makes the first calls of each upload and batch create fail after
// llmsim did them (a 502 for the first, a connection reset for the
// second), and refuses the third with a 429 before it reaches llmsim.
type faults struct {
	mu   sync.Mutex
	seen map[string]int
}

func (f *faults) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || (r.URL.Path != "/v1/files" && r.URL.Path != "/v1/batches") {
			h.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		f.seen[r.URL.Path]++
		n := f.seen[r.URL.Path]
		f.mu.Unlock()
		switch n {
		case 1: // done upstream, answered 502
			h.ServeHTTP(discard{}, r)
			http.Error(w, `{"error":{"message":"bad gateway","type":"server_error"}}`, http.StatusBadGateway)
		case 2: // done upstream, the connection reset
			h.ServeHTTP(discard{}, r)
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic("no hijacker")
			}
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
		case 3: // refused before it reached the provider
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down","type":"rate_limit_exceeded"}}`, http.StatusTooManyRequests)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// TestBatchAPIRetriesSteps: an upload and a create that fail for a while
// (502 and a connection reset after the provider did them, a 429 before)
// are tried again, finding what the failed try left: no file uploaded
// twice, no batch created twice, no item lost.
func TestBatchAPIRetriesSteps(t *testing.T) {
	f := &faults{seen: map[string]int{}}
	e := newBatchEnvWrapped(t, openSQLite, llmsim.Config{BatchTime: 20 * time.Millisecond, Seed: 5}, f.wrap)
	m, _ := e.manager(t, nil)
	const n = 300
	j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
	p := waitJob(t, m, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("ended %s %+v", p.State, p.Counts)
	}
	exactlyOnce(t, m, j, n)
	files, batches := e.noneTwice(t)
	if files != 3 || batches != 3 {
		t.Errorf("%d files and %d batches upstream, want 3 each", files, batches)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen["/v1/files"] < 4 || f.seen["/v1/batches"] < 4 {
		t.Errorf("calls %v; want every fault met", f.seen)
	}
	if online := e.sim.Stats().Chat - e.sim.BatchStats().Answered; online != 0 {
		t.Errorf("%d online calls, want 0", online)
	}
}

// TestBatchAPIAuto: dispatch auto takes the batch API when the job's
// deadline leaves the provider's 24 hours (or it has none), online
// otherwise.
func TestBatchAPIAuto(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		viaAPI bool
	}{{0, true}, {25 * time.Hour, true}, {23 * time.Hour, false}} {
		t.Run(tc.window.String(), func(t *testing.T) {
			e := newBatchEnv(t, openSQLite, llmsim.Config{Seed: 1})
			m, _ := e.manager(t, nil)
			const n = 20
			j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchAuto, CompletionWindow: tc.window}, n)
			p := waitJob(t, m, j.ID)
			if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
				t.Fatalf("ended %s %+v", p.State, p.Counts)
			}
			exactlyOnce(t, m, j, n)
			st := e.sim.BatchStats()
			if got := st.BatchesCreated > 0 && st.Answered == n; got != tc.viaAPI {
				t.Errorf("%d batches, %d lines answered upstream; want upstream %v", st.BatchesCreated, st.Answered, tc.viaAPI)
			}
			if res := readLines(t, m.Dir(j)+"/results.jsonl"); len(res) > 0 {
				want := jobs.DispatchOnline
				if tc.viaAPI {
					want = jobs.DispatchBatchAPI
				}
				if res[0].Dispatch != want {
					t.Errorf("result dispatch %q, want %q", res[0].Dispatch, want)
				}
			}
		})
	}
}

// TestBatchAPIRichItems: items with tools go upstream too, and the tool
// calls come back from the output lines: none runs online.
func TestBatchAPIRichItems(t *testing.T) {
	e := newBatchEnv(t, openSQLite, llmsim.Config{Seed: 2})
	m, _ := e.manager(t, nil)
	ctx := t.Context()
	c, err := m.Begin(ctx, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		it := chatItem(fmt.Sprintf("weather in city %d?", i))
		it.Tools = []batcher.Tool{{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}
		it.ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}
		if err := c.Add(ctx, fmt.Sprintf("c%d", i), it); err != nil {
			t.Fatal(err)
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := waitJob(t, m, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
		t.Fatalf("ended %s %+v", p.State, p.Counts)
	}
	exactlyOnce(t, m, j, n)
	if st := e.sim.BatchStats(); st.Answered != n || e.sim.Stats().Chat != n {
		t.Errorf("%d lines answered upstream, %d chat calls; want all %d upstream, none online", st.Answered, e.sim.Stats().Chat, n)
	}
	raw, err := os.ReadFile(filepath.Join(m.Dir(j), jobs.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(raw), `"name":"get_weather"`); got != n || !strings.Contains(string(raw), `"dispatch":"batch_api"`) {
		t.Errorf("%d tool calls of get_weather in the results, want %d from the batch API:\n%.400s", got, n, raw)
	}
}
