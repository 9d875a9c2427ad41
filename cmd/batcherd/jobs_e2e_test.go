package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
	"github.com/batcherhq/batcher/llmsim"
)

// upstream is an llmsim behind a counter of the chat calls it answered.
// Once hold is called, it holds every chat call (counted) until the
// caller leaves, and reports the first on held.
type upstream struct {
	*httptest.Server
	sim     *llmsim.Server
	calls   atomic.Int64
	holding atomic.Bool
	held    chan struct{} // one value: a call is held
	release chan struct{} // closed at the end: held calls return
}

// hold makes u hold every chat call from now on.
func (u *upstream) hold() { u.holding.Store(true) }

func newUpstream(t *testing.T, latency time.Duration) *upstream {
	t.Helper()
	sim, err := llmsim.New(llmsim.Config{ReplyTokens: 8, Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{sim: sim, held: make(chan struct{}, 1), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			u.calls.Add(1)
			if u.holding.Load() {
				select {
				case u.held <- struct{}{}:
				default:
				}
				// Read the body so that the server watches the connection
				// and ends r's context when the killed caller's closes.
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-r.Context().Done():
				case <-u.release:
				}
				return
			}
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(u.release)
		sim.Close()
		u.Close()
	})
	return u
}

// buildBatcherd builds the binary into a test directory.
func buildBatcherd(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			built.skip = "no go tool to build batcherd"
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "batcherd-test-"); built.err != nil {
			return
		}
		bin := filepath.Join(built.dir, "batcherd")
		// A build may queue behind other packages' tests on a loaded
		// machine: its bound is generous, and it runs once per package.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		built.bin = bin
	})
	switch {
	case built.skip != "":
		t.Skip(built.skip)
	case built.err != nil:
		t.Fatal(built.err)
	}
	return built.bin
}

// built is the batcherd binary the tests share, built on first use and
// removed by TestMain.
var built struct {
	once     sync.Once
	dir, bin string
	skip     string
	err      error
}

// daemon is a running batcherd binary.
type daemon struct {
	cmd    *exec.Cmd
	logs   *logScanner
	addr   string
	exited chan error
}

func startDaemon(t *testing.T, bin string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATCHER_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, logs: newLogScanner(), exited: make(chan error, 1)}
	go func() {
		d.logs.scan(stderr)
		d.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { d.kill() })
	select {
	case d.addr = <-d.logs.addr:
	case err := <-d.exited:
		d.exited <- err
		t.Fatalf("batcherd exited before listening: %v\n%s", err, d.logs)
	case <-time.After(testTimeout):
		t.Fatalf("batcherd did not listen:\n%s", d.logs)
	}
	return d
}

// kill sends SIGKILL and waits for the process to end.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	err := <-d.exited
	d.exited <- err
}

func (d *daemon) client(t *testing.T) batcherv1.JobServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return batcherv1.NewJobServiceClient(conn)
}

func jobsConfig(t *testing.T, upstreamURL string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "batcherd.yaml")
	cfg := fmt.Sprintf(`
queue_capacity: 10000
backends:
  - name: llmsim
    type: openai
    max_concurrency: 64
    openai: {base_url: %s/v1, max_fan_out: 64}
routes:
  - {name: chat, operation: chat, backend: llmsim, model: sim-chat, batching: {min_batch_size: 1, max_batch_size: 32, window: 2ms, max_wait: 20ms}}
`, upstreamURL)
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// createChatJob creates a job of n chat items in OpenAI's line form.
func createChatJob(t *testing.T, c batcherv1.JobServiceClient, n int, concurrent int32) string {
	t.Helper()
	st, err := c.CreateJob(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{
		Name: "e2e", Model: "chat", ConcurrentRequests: concurrent}}}); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < n; start += 1000 {
		items := &batcherv1.JobItems{}
		for i := start; i < min(n, start+1000); i++ {
			items.OpenaiLines = append(items.OpenaiLines, &batcherv1.OpenAIBatchLine{Line: fmt.Appendf(nil,
				`{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"item %d"}],"max_tokens":8}}`, i, i)})
		}
		if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: items}}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if resp.GetAccepted() != int64(n) {
		t.Fatalf("accepted %d of %d", resp.GetAccepted(), n)
	}
	return resp.GetJob().GetId()
}

// watchUntil watches a job until done(progress) holds or it ends.
func watchUntil(t *testing.T, c batcherv1.JobServiceClient, id string, done func(*batcherv1.JobProgress) bool) *batcherv1.JobProgress {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	st, err := c.WatchJob(ctx, &batcherv1.WatchJobRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var last *batcherv1.JobProgress
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return last
		}
		if err != nil {
			t.Fatalf("WatchJob: %v (last %v)", err, last)
		}
		last = r.GetProgress()
		if done(last) {
			return last
		}
	}
}

func terminal(p *batcherv1.JobProgress) bool {
	return jobs.State(p.GetState()).Terminal()
}

// checkResults reads a job's results.jsonl: every custom id once.
func checkResults(t *testing.T, dataDir, id string, n int) {
	t.Helper()
	f, err := os.Open(filepath.Join(jobs.JobDir(dataDir, id), jobs.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen := make(map[string]int, n)
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int `json:"status_code"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Response.StatusCode != http.StatusOK {
			t.Fatalf("line %d %q: %v", lines+1, sc.Text(), err)
		}
		seen[l.CustomID]++
		lines++
	}
	dups := 0
	for _, c := range seen {
		if c > 1 {
			dups++
		}
	}
	if lines != n || len(seen) != n || dups > 0 {
		t.Fatalf("results.jsonl: %d lines, %d distinct ids, %d duplicated; want exactly %d", lines, len(seen), dups, n)
	}
}

// A job survives kill -9: restarted, batcherd finishes it with every result
// line once, and the upstream saw at most the items in flight at the kill
// twice.
func TestEndToEndJobSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n, concurrent = 20_000, 256
	bin := buildBatcherd(t)
	up := newUpstream(t, 2*time.Millisecond)
	cfg := jobsConfig(t, up.URL)
	dataDir := t.TempDir()

	d := startDaemon(t, bin, "--config", cfg, "--data-dir", dataDir)
	c := d.client(t)
	id := createChatJob(t, c, n, concurrent)
	watchUntil(t, c, id, func(p *batcherv1.JobProgress) bool { return p.GetCounts().GetSucceeded() >= n/4 })
	d.kill()
	atKill := up.calls.Load()
	if atKill >= n {
		t.Fatalf("the job finished (%d calls) before the kill: make it slower", atKill)
	}

	d2 := startDaemon(t, bin, "--config", cfg, "--data-dir", dataDir)
	c2 := d2.client(t)
	last := watchUntil(t, c2, id, terminal)
	if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != n {
		t.Fatalf("after restart the job ended %v", last)
	}
	checkResults(t, dataDir, id, n)
	redone := up.calls.Load() - n
	t.Logf("killed after %d upstream calls; %d items redone (bound %d in flight)", atKill, redone, concurrent)
	if redone < 0 || redone > concurrent {
		t.Fatalf("%d upstream calls for %d items: %d redone, want at most the %d in flight", up.calls.Load(), n, redone, concurrent)
	}
	if !d2.logs.has("jobs: resumed claims left by the previous run") {
		t.Errorf("restart did not report the claims it resumed:\n%s", d2.logs)
	}
}

func TestJobsStartupErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", filepath.Join(file, "sub")}, "data directory " + filepath.Join(file, "sub")},
		{[]string{"--data-dir", t.TempDir(), "--job-store", "postgres", "--postgres-dsn", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2"}, "PostgreSQL at 127.0.0.1:1/test unreachable"},
		{[]string{"--job-store", "mysql"}, `job_store (--job-store): must be sqlite or postgres, got "mysql"`},
	} {
		var stderr strings.Builder
		code := run(t.Context(), func() {}, append(tc.args, "--listen=127.0.0.1:0"), noEnv, &stderr)
		if code == exitOK || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to name %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// Two replicas on PostgreSQL share one job. One is killed: as soon as its
// liveness lock is gone (not after its lease) the other takes its items
// over and finishes the job, and no item is recorded twice.
//
// Each replica has its own upstream, so that A is killed while it surely
// holds claims: once a quarter is done, A's upstream holds its calls, and
// the kill comes after the first is held. Killed between two claims
// (nothing in flight), A would leave nothing to take over, which a fast
// machine hit in about one run in five.
//
// The lease is 20 s, not a short one: each replica renews its leases every
// third of it and takes over any lease past its end, so with a lease of
// 2 s a live replica whose renewal a loaded machine delayed by 1.3 s would
// lose its claims to the other before the kill, both would call upstream
// for them, and the items redone could pass the bound. The liveness lock
// alone brings the takeover well within the test's timeout.
func TestEndToEndTwoReplicasOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dsn := storetest.PostgresSchema(t)
	const n, concurrent = 10_000, 128
	bin := buildBatcherd(t)
	upA, upB := newUpstream(t, 5*time.Millisecond), newUpstream(t, 5*time.Millisecond)
	args := []string{"--job-store", "postgres", "--postgres-dsn", dsn, "--jobs-lease", "20s"}
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startDaemon(t, bin, append(args, "--config", jobsConfig(t, upA.URL), "--data-dir", dirA)...)
	b := startDaemon(t, bin, append(args, "--config", jobsConfig(t, upB.URL), "--data-dir", dirB)...)
	id := createChatJob(t, a.client(t), n, concurrent)
	cb := b.client(t)
	// Both work on it; kill A once a quarter is done.
	watchUntil(t, cb, id, func(p *batcherv1.JobProgress) bool { return p.GetCounts().GetSucceeded() >= n/4 })
	upA.hold()
	select {
	case <-upA.held:
	case <-time.After(30 * time.Second):
		t.Fatalf("A made no upstream call in 30 s after a quarter of the job was done")
	}
	a.kill()
	last := watchUntil(t, cb, id, terminal)
	if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != n {
		t.Fatalf("the job ended %v", last)
	}
	// B's files hold every result once: it exports from the database.
	checkResults(t, dirB, id, n)
	calls := upA.calls.Load() + upB.calls.Load()
	redone := calls - n
	t.Logf("%d items redone after the kill (bound %d in flight on A)", redone, concurrent)
	if redone < 1 || redone > concurrent {
		t.Fatalf("%d upstream calls for %d items: %d redone, want at least A's held one and at most A's %d in flight\nA:\n%s\nB:\n%s", calls, n, redone, concurrent, a.logs, b.logs)
	}
	if !b.logs.has("jobs: took over the claims of a process that died") {
		t.Errorf("B did not take over A's claims:\n%s", b.logs)
	}
}
