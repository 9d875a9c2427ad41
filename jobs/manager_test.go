package jobs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a core on the simulated backend (and a gated one), a store and a
// manager, torn down at the test's end.
type env struct {
	core  *batcher.Batcher
	sim   *sim.Provider
	gate  *gate
	store jobs.Store
	m     *jobs.Manager
	dir   string
}

// gate is a backend whose calls wait for open (unless it is closed over),
// and which fails every call while failing is set.
type gate struct {
	open    chan struct{}
	calls   atomic.Int64
	items   atomic.Int64
	failing atomic.Bool
}

func (g *gate) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	g.calls.Add(1)
	g.items.Add(int64(len(b.Requests)))
	if g.failing.Load() {
		return &batcher.UpstreamError{Class: batcher.ClassServer, StatusCode: 503, Message: "down"}
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	for i, r := range b.Requests {
		out[i] = batcher.Response{Text: "gated " + r.Input.Prompt, Usage: batcher.Usage{PromptTokens: 1, CompletionTokens: 2}}
	}
	return nil
}

// started is a manager made of cfg and started, failing the test if
// either fails; shutting it down is the caller's.
func started(t *testing.T, cfg jobs.Config) *jobs.Manager {
	t.Helper()
	m, err := jobs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return m
}

// shutdown is the package's shared helper, ShutdownForTest
// (export_test.go), which its internal tests call too.
var shutdown = jobs.ShutdownForTest

// envOn is a started manager over core on a SQLite store in a temporary
// directory, with the tests' short commit and poll intervals; the test's
// cleanup shuts the manager and then core down.
func envOn(t *testing.T, core *batcher.Batcher) *env {
	t.Helper()
	dir := t.TempDir()
	m := started(t, jobs.Config{Store: openSQLite(t, dir), Core: core, DataDir: dir, Exclusive: true,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	t.Cleanup(func() { shutdown(t, m, core) })
	return &env{core: core, m: m, dir: dir}
}

func newEnv(t *testing.T, mut func(*jobs.Config)) *env {
	t.Helper()
	p, err := sim.New(sim.Config{BaseLatency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{open: make(chan struct{})}
	brk := &gate{open: make(chan struct{})}
	brk.failing.Store(true)
	fast := batcher.BatchConfig{MaxBatchSize: 50, MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}
	core, err := batcher.New(
		batcher.WithQueueCapacity(10_000),
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 16,
			Retry: batcher.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}}),
		batcher.WithBackend(batcher.BackendConfig{Name: "gate", Backend: g, MaxConcurrency: 16,
			Retry:   batcher.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond},
			Breaker: batcher.BreakerConfig{Consecutive: -1, MinCalls: 1 << 30}}),
		// brk fails every call, and its breaker opens at the first failure
		// and stays open.
		batcher.WithBackend(batcher.BackendConfig{Name: "brk", Backend: brk, MaxConcurrency: 16,
			Retry:   batcher.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond},
			Breaker: batcher.BreakerConfig{Consecutive: 1, Cooldown: time.Hour}}),
		batcher.WithRoute(batcher.Route{Name: "brkchat", Op: batcher.OpChat, Backend: "brk", Batch: fast}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "sim", Batch: fast}),
		batcher.WithRoute(batcher.Route{Name: "chat2", Op: batcher.OpChat, Backend: "sim", Batch: fast}),
		batcher.WithRoute(batcher.Route{Name: "cmpl", Op: batcher.OpCompletion, Backend: "sim", Batch: fast}),
		batcher.WithRoute(batcher.Route{Name: "gated", Op: batcher.OpCompletion, Backend: "gate", Batch: fast}),
		batcher.WithRoute(batcher.Route{Name: "gatedchat", Op: batcher.OpChat, Backend: "gate", Batch: fast}),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store := openSQLite(t, dir)
	cfg := jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: true,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond}
	if mut != nil {
		mut(&cfg)
	}
	m := started(t, cfg)
	e := &env{core: core, sim: p, gate: g, store: store, m: m, dir: dir}
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
		shutdown(t, m, core)
	})
	return e
}

func chatItem(text string) *jobs.ItemRequest {
	return &jobs.ItemRequest{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: text}}}}
}

// create makes a job of n chat items (custom ids c0...) plus extra lines.
func (e *env) create(t *testing.T, spec jobs.Spec, n int, lines ...string) *jobs.Job {
	t.Helper()
	ctx := t.Context()
	c, err := e.m.Begin(ctx, spec)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	for i := range n {
		if err := c.Add(ctx, fmt.Sprintf("c%d", i), chatItem(fmt.Sprintf("item %d says hello", i))); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	for _, l := range lines {
		if err := c.AddLine(ctx, []byte(l)); err != nil {
			t.Fatalf("AddLine: %v", err)
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return j
}

// wait watches the job until it is terminal and returns its last progress
// and every state it reported.
func (e *env) wait(t *testing.T, id string) (jobs.Progress, []jobs.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var last jobs.Progress
	var states []jobs.State
	err := e.m.Watch(ctx, id, 20*time.Millisecond, func(p jobs.Progress) error {
		if os.Getenv("JOBS_DEBUG") != "" {
			t.Logf("%v %s %+v", time.Now().Format("05.000"), p.State, p.Counts)
		}
		if len(states) == 0 || states[len(states)-1] != p.State {
			states = append(states, p.State)
		}
		last = p
		return nil
	})
	if err != nil {
		t.Fatalf("Watch: %v (last %+v)", err, last)
	}
	return last, states
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int `json:"status_code"`
		Body       struct {
			Model   string `json:"model"`
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				Text string `json:"text"`
			} `json:"choices"`
		} `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Batcher *struct {
		Item        int64  `json:"item"`
		Group       string `json:"group"`
		Run         int    `json:"run"`
		Judge       bool   `json:"judge"`
		Model       string `json:"model"`
		JudgePrompt string `json:"judge_prompt"`
	} `json:"batcher"`
	Dispatch string   `json:"dispatch"`
	Cost     *float64 `json:"cost_usd"`
}

func readLines(t *testing.T, path string) []outLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []outLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: bad line %q: %v", path, sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func TestJobRunsToCompletion(t *testing.T) {
	e := newEnv(t, nil)
	const n = 600
	j := e.create(t, jobs.Spec{Name: "basic", Model: "chat"}, n,
		`{"custom_id":"oa-1","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"oa-2","method":"POST","url":"/v1/completions","body":{"model":"cmpl","prompt":"complete me"}}`,
		`{not json`,
		`{"custom_id":"oa-4","method":"POST","url":"/v1/chat/completions","body":{"model":"nope","messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"oa-5","method":"POST","url":"/v1/images","body":{}}`,
	)
	if j.Counts.Total != n+5 || j.Invalid != 3 || (j.State != jobs.StateQueued && j.State != jobs.StateRunning) {
		t.Fatalf("created %s %+v (invalid %d)", j.State, j.Counts, j.Invalid)
	}
	p, states := e.wait(t, j.ID)
	if p.State != jobs.StateCompleted {
		t.Fatalf("job ended %s, want completed (states %v)", p.State, states)
	}
	if want := (jobs.Counts{Total: n + 5, Succeeded: n + 2, Failed: 3}); p.Counts != want {
		t.Fatalf("counts %+v, want %+v", p.Counts, want)
	}
	if p.TokensIn == 0 || p.TokensOut == 0 || p.SuccessRate < 0.99 {
		t.Fatalf("progress %+v lacks tokens or success rate", p)
	}
	if states[len(states)-1] != jobs.StateCompleted || !contains(states, jobs.StateRunning) {
		t.Fatalf("states %v", states)
	}
	dir := jobs.JobDir(e.dir, j.ID)
	res := readLines(t, filepath.Join(dir, jobs.ResultsFile))
	errs := readLines(t, filepath.Join(dir, jobs.ErrorsFile))
	if len(res) != n+2 || len(errs) != 3 {
		t.Fatalf("%d result and %d error lines, want %d and 3", len(res), len(errs), n+2)
	}
	seen := map[string]bool{}
	for _, l := range res {
		if seen[l.CustomID] || l.Response == nil || l.Response.StatusCode != http.StatusOK || len(l.Response.Body.Choices) != 1 {
			t.Fatalf("result line %+v (duplicate %v)", l, seen[l.CustomID])
		}
		seen[l.CustomID] = true
	}
	if !seen["c0"] || !seen["oa-1"] || !seen["oa-2"] {
		t.Fatal("results lack c0, oa-1 or oa-2")
	}
	wantErr := map[string]string{"line-603": "line 603: malformed JSON", "oa-4": `line 604: model: unknown model "nope"`, "oa-5": "line 605: url: unknown endpoint"}
	for _, l := range errs {
		if l.Error == nil || !strings.HasPrefix(l.Error.Message, wantErr[l.CustomID]) || l.Error.Code != jobs.CodeInvalidRequest {
			t.Errorf("error line %s: %+v, want a message starting %q", l.CustomID, l.Error, wantErr[l.CustomID])
		}
	}
	var sum jobs.Summary
	b, err := os.ReadFile(filepath.Join(dir, jobs.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.State != "completed" || sum.Counts != p.Counts {
		t.Fatalf("summary %+v (%v)", sum, err)
	}
	// Results come back in item order, and filter by outcome.
	all, err := e.m.Results(t.Context(), j.ID, -1, jobs.ItemPending, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatal("results out of item order")
		}
	}
	failed, _ := e.m.Results(t.Context(), j.ID, -1, jobs.ItemFailed, 100)
	if len(all) != n+5 || len(failed) != 3 {
		t.Fatalf("%d results, %d failed", len(all), len(failed))
	}
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestBadJobs(t *testing.T) {
	e := newEnv(t, func(c *jobs.Config) { c.MaxItems = 3 })
	ctx := t.Context()
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(ctx); !errors.Is(err, jobs.ErrEmpty) {
		t.Fatalf("empty job: %v, want ErrEmpty", err)
	}
	c, _ = e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	var last error
	for i := range 4 {
		last = c.Add(ctx, "", chatItem(fmt.Sprint(i)))
	}
	if !errors.Is(last, jobs.ErrTooManyItems) {
		t.Fatalf("4th item of 3 allowed: %v, want ErrTooManyItems", last)
	}
	c.Abort()
	c, _ = e.m.Begin(ctx, jobs.Spec{Model: "chat", FailOnInvalid: true})
	if err := c.AddLine(ctx, []byte(`{oops`)); !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("fail_on_invalid: %v", err)
	}
	c.Abort()
	bad := []jobs.Spec{
		{Model: "nope"},
		{Priority: batcher.PriorityUrgent},
		{Groups: []jobs.Group{{Name: "a", Runs: 101}}},
		{Judge: &jobs.Judge{Model: "chat", PromptTemplate: "{{"}},
	}
	for _, spec := range bad {
		if _, err := e.m.Begin(ctx, spec); !errors.Is(err, jobs.ErrInvalid) {
			t.Errorf("spec %+v: %v, want ErrInvalid", spec, err)
		}
	}
	if _, err := e.m.Get(ctx, "job_unknown"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("Get(unknown) = %v", err)
	}
}

func TestRunGroupsAndJudge(t *testing.T) {
	e := newEnv(t, nil)
	temp := float32(0.9)
	spec := jobs.Spec{Model: "chat", Groups: []jobs.Group{
		{Name: "hot", Runs: 3, Temperature: &temp},
		{Name: "seeded", Model: "chat2", Runs: 2, Temperature: &temp, Seeds: []int64{7, 7}},
	}, Judge: &jobs.Judge{Model: "chat", PromptTemplate: "Q: {{.Input}}{{range .Runs}} [{{.Group}}/{{.Run}}: {{.Output}}]{{end}}"}}
	j := e.create(t, spec, 4)
	if j.Counts.Total != 4*6 {
		t.Fatalf("total %d, want 4 inputs × (3+2 runs + judge)", j.Counts.Total)
	}
	p, _ := e.wait(t, j.ID)
	if p.State != jobs.StateCompleted || p.Counts.Succeeded != 24 {
		t.Fatalf("progress %+v", p)
	}
	if g := p.Groups; g["hot"].Succeeded != 12 || g["seeded"].Succeeded != 8 || g["judge"].Succeeded != 4 {
		t.Fatalf("group counts %+v", g)
	}
	lines := readLines(t, filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ResultsFile))
	type key struct {
		item  int64
		group string
		run   int
	}
	out := map[key]outLine{}
	for _, l := range lines {
		if l.Batcher == nil {
			t.Fatalf("line %+v has no tags", l)
		}
		out[key{l.Batcher.Item, l.Batcher.Group, l.Batcher.Run}] = l
	}
	if len(out) != 24 {
		t.Fatalf("%d distinct tagged lines, want 24", len(out))
	}
	text := func(k key) string { return out[k].Response.Body.Choices[0].Message.Content }
	for item := range int64(4) {
		hot := map[string]bool{}
		for run := range 3 {
			hot[text(key{item, "hot", run})] = true
		}
		if len(hot) < 2 {
			t.Errorf("item %d: the hot group's 3 runs gave %d distinct texts", item, len(hot))
		}
		if text(key{item, "seeded", 0}) != text(key{item, "seeded", 1}) {
			t.Errorf("item %d: runs with the same seed differ", item)
		}
		if m := out[key{item, "seeded", 0}].Batcher.Model; m != "chat2" {
			t.Errorf("seeded group served by %q, want chat2", m)
		}
		judge := out[key{item, "judge", 0}]
		if !judge.Batcher.Judge {
			t.Fatalf("item %d: no judge line", item)
		}
		jp := judge.Batcher.JudgePrompt
		if !strings.HasPrefix(jp, fmt.Sprintf("Q: item %d says hello", item)) {
			t.Errorf("judge prompt %q lacks the input", jp)
		}
		checks := []key{{item, "hot", 0}, {item, "hot", 2}, {item, "seeded", 1}}
		for _, k := range checks {
			if want := fmt.Sprintf("[%s/%d: %s]", k.group, k.run, text(k)); !strings.Contains(jp, want) {
				t.Errorf("judge prompt %q lacks %q", jp, want)
			}
		}
	}
}

func TestNextModelAndFailingGroup(t *testing.T) {
	e := newEnv(t, nil)
	e.gate.failing.Store(true)
	zero := 0
	spec := jobs.Spec{Model: "chat", MaxRetries: &zero, Groups: []jobs.Group{
		{Name: "moves", Model: "gatedchat", NextModel: "chat"},
		{Name: "fails", Model: "gatedchat"},
		{Name: "fine"},
	}}
	j := e.create(t, spec, 20)
	p, _ := e.wait(t, j.ID)
	if g := p.Groups; g["moves"].Succeeded != 20 || g["fails"].Failed != 20 || g["fine"].Succeeded != 20 {
		t.Fatalf("group counts %+v", g)
	}
	if p.State != jobs.StateCompleted {
		t.Fatalf("state %s", p.State)
	}
	// max_retries 0: each failing item was tried once on the gated backend.
	if n := e.gate.items.Load(); n != 40 {
		t.Fatalf("gated backend saw %d items, want 40 (no retries)", n)
	}
	for _, l := range readLines(t, filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ResultsFile)) {
		if l.Batcher.Group == "moves" && l.Batcher.Model != "chat" {
			t.Fatalf("moved line served by %q", l.Batcher.Model)
		}
	}
}

// Seed 000's case: a group whose model's breaker is open moves every item
// to next_model (the core refuses such a submit at once, which used to end
// the item failed without a move).
func TestNextModelWhenTheBreakerIsOpen(t *testing.T) {
	e := newEnv(t, nil)
	zero := 0
	j := e.create(t, jobs.Spec{Model: "chat", MaxRetries: &zero, ConcurrentRequests: 4, Groups: []jobs.Group{
		{Name: "brk", Model: "brkchat", NextModel: "chat"},
	}}, 40)
	p, _ := e.wait(t, j.ID)
	if g := p.Groups["brk"]; g.Succeeded != 40 {
		t.Fatalf("group counts %+v, want 40 moved to chat and succeeded", g)
	}
	for _, l := range readLines(t, filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ResultsFile)) {
		if l.Batcher.Model != "chat" {
			t.Fatalf("line served by %q, want chat", l.Batcher.Model)
		}
	}
}

func gatedSpec() jobs.Spec { return jobs.Spec{Model: "gatedchat", ConcurrentRequests: 10} }

func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	j := e.create(t, gatedSpec(), 100)
	// Wait until the job has its tasks in flight at the gate.
	ctx := t.Context()
	for e.gate.calls.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no call reached the backend")
		case <-time.After(time.Millisecond):
		}
	}
	if _, err := e.m.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	// The gate stays shut: the items in flight end cancelled too, without
	// waiting for their upstream calls.
	p, states := e.wait(t, j.ID)
	if p.State != jobs.StateCancelled || !contains(states, jobs.StateCancelling) && states[0] != jobs.StateCancelled {
		t.Fatalf("states %v", states)
	}
	c := p.Counts
	if c.Cancelled != 100 || c.Succeeded != 0 {
		t.Fatalf("counts %+v, want all 100 cancelled, those in flight included", c)
	}
	errs := readLines(t, filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ErrorsFile))
	if int64(len(errs)) != c.Cancelled || errs[0].Error.Code != jobs.CodeCancelled {
		t.Fatalf("%d error lines for %d cancelled", len(errs), c.Cancelled)
	}
	// The Batch API's cancelling_at: when the job entered CANCELLING.
	got, err := e.m.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CancellingAt.IsZero() || got.CancellingAt.After(got.EndedAt) || !got.FinalizingAt.IsZero() {
		t.Fatalf("cancelling at %v, finalizing at %v, ended at %v: want cancelling set before the end, finalizing unset",
			got.CancellingAt, got.FinalizingAt, got.EndedAt)
	}
	// Once ended, CancelUnended says so; Cancel answers the job as it is.
	if j, err := e.m.CancelUnended(ctx, j.ID); !errors.Is(err, jobs.ErrEnded) || j != nil ||
		!strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("CancelUnended of an ended job: %v, %v, want ErrEnded naming its state", j, err)
	}
	if j, err := e.m.Cancel(ctx, j.ID); err != nil || j.State != jobs.StateCancelled {
		t.Fatalf("Cancel of an ended job: %v, %v, want it as it is", j, err)
	}
}

func TestCompletionWindowExpires(t *testing.T) {
	e := newEnv(t, nil)
	spec := gatedSpec()
	spec.CompletionWindow = 300 * time.Millisecond
	j := e.create(t, spec, 50)
	p, _ := e.wait(t, j.ID)
	if p.State != jobs.StateExpired || p.Counts.Expired != 50 {
		t.Fatalf("progress %+v, want 50 expired", p)
	}
	errs := readLines(t, filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ErrorsFile))
	if len(errs) != 50 || errs[0].Error.Code != jobs.CodeExpired {
		t.Fatalf("%d error lines, first %+v", len(errs), errs[0].Error)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, nil)
	j := e.create(t, gatedSpec(), 30)
	ctx := t.Context()
	if err := e.m.Delete(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(ctx, j.ID); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("Get after delete: %v", err)
	}
	if _, err := os.Stat(jobs.JobDir(e.dir, j.ID)); !os.IsNotExist(err) {
		t.Fatalf("files left: %v", err)
	}
	if err := e.m.Delete(ctx, j.ID); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// A spec with only retry_delay keeps the backend's retry count (1 here,
// not the core's default), with the spec's first backoff.
func TestRetryDelayAloneKeepsTheBackendsRetries(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	g.failing.Store(true)
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "gate", Backend: g, MaxConcurrency: 4,
			Retry:   batcher.RetryPolicy{MaxRetries: 1, InitialBackoff: time.Hour, MaxBackoff: time.Hour},
			Breaker: batcher.BreakerConfig{Consecutive: -1, MinCalls: 1 << 30}}),
		batcher.WithRoute(batcher.Route{Name: "gatedchat", Op: batcher.OpChat, Backend: "gate",
			Batch: batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1, Window: time.Millisecond, MaxWait: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := started(t, jobs.Config{Store: openSQLite(t, dir), Core: core, DataDir: dir, Exclusive: true,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	e := &env{core: core, gate: g, m: m, dir: dir}
	t.Cleanup(func() {
		close(g.open)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
		_ = core.Shutdown(ctx)
	})
	// The backend's own first backoff is an hour: the job ends only if the
	// spec's delay replaced it.
	j := e.create(t, jobs.Spec{Model: "gatedchat", RetryDelay: time.Millisecond}, 5)
	p, _ := e.wait(t, j.ID)
	if p.Counts.Failed != 5 {
		t.Fatalf("counts %+v, want 5 failed", p.Counts)
	}
	if n := g.items.Load(); n != 10 {
		t.Fatalf("the backend saw %d items, want 10 (one retry each, the backend's count)", n)
	}
}

// On a shared (PostgreSQL) store, a manager removes the jobs a dead creator
// left VALIDATING, and leaves those a live creator still holds.
func TestAbandonedJobsDroppedOnSharedStore(t *testing.T) {
	store := openPostgres(t)
	e := newEnv(t, nil) // for its core
	dir := t.TempDir()
	creator, err := jobs.New(jobs.Config{Store: store, Core: e.core, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	live, err := creator.Begin(t.Context(), jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	// A creator that died an hour ago left this one, holding nothing.
	dead := &jobs.Job{ID: "job_dead_creator_" + strconv.FormatInt(time.Now().UnixNano(), 36), State: jobs.StateValidating,
		CreatedAt: time.Now().Add(-time.Hour), Spec: jobs.Spec{Model: "chat"}}
	if err := store.CreateJob(t.Context(), dead, 0); err != nil {
		t.Fatal(err)
	}
	m := started(t, jobs.Config{Store: store, Core: e.core, DataDir: dir})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	})
	if _, err := store.GetJob(t.Context(), dead.ID); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("the dead creator's job: GetJob = %v, want ErrNotFound", err)
	}
	if err := live.Add(t.Context(), "", chatItem("still coming")); err != nil {
		t.Fatal(err)
	}
	j, err := live.Finish(t.Context())
	if err != nil {
		t.Fatalf("the live creator's job: Finish = %v", err)
	}
	// Finish queues it and reads it back; the other manager on the shared
	// store may claim it, or even finish its one item, in between.
	switch j.State {
	case jobs.StateQueued, jobs.StateRunning, jobs.StateFinalizing, jobs.StateCompleted:
	default:
		t.Fatalf("the live creator's job is %s, want QUEUED or later on its way to COMPLETED", j.State)
	}
}
