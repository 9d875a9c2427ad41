package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
	"github.com/batcherhq/batcher/llmsim"
)

// The batch-API figures of issue 31 run the built batcherd against an
// in-process llmsim whose /v1/files and /v1/batches sit behind batchSim: it
// counts the batch API's calls as they happen and can hold one of them, so
// that a test kills batcherd at a known step instead of after a sleep.

// The batch API's calls batchSim tells apart.
const (
	callUpload   = "upload"   // POST /v1/files
	callCreate   = "create"   // POST /v1/batches
	callPoll     = "poll"     // GET /v1/batches/{id}
	callDownload = "download" // GET /v1/files/{id}/content
	callOther    = "other"    // the rest of /v1/files and /v1/batches: lists, cancels
)

func batchCall(r *http.Request) string {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v1/files":
		return callUpload
	case r.Method == http.MethodPost && p == "/v1/batches":
		return callCreate
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/batches/"):
		return callPoll
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/files/") && strings.HasSuffix(p, "/content"):
		return callDownload
	case strings.HasPrefix(p, "/v1/files") || strings.HasPrefix(p, "/v1/batches"):
		return callOther
	}
	return ""
}

// batchSim is llmsim behind a handler that counts the batch API's calls
// (begun, and those under way now) and holds the nth call of one kind.
// From the moment that call is held until the test releases it, the batch
// API is frozen: a call that arrives then never reaches llmsim (it is
// answered 503 after the release, as if lost with the process that sent
// it), so that the upstream's state at a kill is the held call's alone.
type batchSim struct {
	*httptest.Server
	sim     *llmsim.Server
	mu      sync.Mutex
	settled *sync.Cond       // signalled when serving drops to 0
	begun   map[string]int64 // calls of each kind so far
	active  map[string]int64 // calls of each kind under way
	serving int              // calls inside llmsim now, the held one aside
	gate    *gate            // the call to hold; nil: none
	frozen  *gate            // the held call that froze the batch API
	release chan struct{}    // closed at cleanup: every held call goes on
}

// gate holds the nth call of a kind: an upload after the first head bytes
// of its body (the upload is under way), a create or a poll after llmsim
// served it but before batcherd hears the answer. arrived closes when the
// call is held; the call goes on when release closes.
type gate struct {
	call    string
	nth     int64
	head    int64
	arrived chan struct{}
	release chan struct{}
	// done closes when the held call returned; cut says then whether an
	// upload's body ended short (the kill cut the upload).
	done chan struct{}
	cut  atomic.Bool
}

func newBatchSim(t *testing.T, cfg llmsim.Config) *batchSim {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &batchSim{sim: sim, begun: map[string]int64{}, active: map[string]int64{}, release: make(chan struct{})}
	s.settled = sync.NewCond(&s.mu)
	s.Server = httptest.NewServer(s)
	t.Cleanup(func() {
		close(s.release)
		s.Close()
		sim.Close()
	})
	return s
}

// hold makes the nth call of kind (counted from now on) wait, an upload
// once head bytes of its body came; the gate tells when it arrived.
func (s *batchSim) hold(kind string, nth, head int64) *gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := &gate{call: kind, nth: s.begun[kind] + nth, head: max(head, 1), arrived: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	s.gate = g
	return g
}

// settle waits until no call but the held one is inside llmsim: what
// upstream holds stops changing until the release.
func (s *batchSim) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.serving > 0 {
		s.settled.Wait()
	}
}

// unfreeze ends the freeze and lets the held call go on.
func (s *batchSim) unfreeze(g *gate) {
	s.mu.Lock()
	s.frozen = nil
	s.mu.Unlock()
	close(g.release)
	<-g.done
}

// calls returns how many calls of kind began, and how many are under way.
func (s *batchSim) calls(kind string) (begun, active int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.begun[kind], s.active[kind]
}

func (s *batchSim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := batchCall(r)
	if kind == "" {
		s.sim.ServeHTTP(w, r)
		return
	}
	s.mu.Lock()
	s.begun[kind]++
	s.active[kind]++
	var g *gate
	frozen := s.frozen
	switch {
	case frozen != nil:
	case s.gate != nil && s.gate.call == kind && s.gate.nth == s.begun[kind]:
		g, s.gate = s.gate, nil
		s.frozen = g
	default:
		s.serving++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active[kind]--
		if g == nil && frozen == nil {
			if s.serving--; s.serving == 0 {
				s.settled.Broadcast()
			}
		}
		s.mu.Unlock()
	}()
	switch {
	case frozen != nil:
		s.wait(frozen)
		http.Error(w, "lost in the freeze", http.StatusServiceUnavailable)
	case g == nil:
		s.sim.ServeHTTP(w, r)
	case kind == callUpload:
		defer close(g.done)
		head := make([]byte, g.head)
		n, _ := io.ReadFull(r.Body, head)
		close(g.arrived)
		s.wait(g)
		r.Body = &cutReader{r: io.MultiReader(bytes.NewReader(head[:n]), r.Body), c: r.Body, cut: &g.cut}
		s.sim.ServeHTTP(w, r)
	default:
		defer close(g.done)
		rec := httptest.NewRecorder()
		s.sim.ServeHTTP(rec, r)
		close(g.arrived)
		s.wait(g)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
}

func (s *batchSim) wait(g *gate) {
	select {
	case <-g.release:
	case <-s.release:
	}
}

// cutReader notes whether a body ended in an error rather than EOF.
type cutReader struct {
	r   io.Reader
	c   io.Closer
	cut *atomic.Bool
}

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.cut.Store(true)
	}
	return n, err
}

func (c *cutReader) Close() error { return c.c.Close() }

// The figures' price table: what a route's price says, and what the tests
// compute the online cost of a job's tokens from.
const (
	priceIn, priceOut = 2.5, 10.0 // USD per million tokens
)

// batchConfig writes a batcherd config whose route chat may dispatch to
// sim's batch API in upstream batches of at most maxRequests items.
func batchConfig(t *testing.T, simURL string, maxRequests int, pollMin, pollMax, createTimeout time.Duration) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "batcherd.yaml")
	if createTimeout == 0 {
		createTimeout = jobs.DefaultBatchCreateTimeout
	}
	cfg := fmt.Sprintf(`
queue_capacity: 10000
backends:
  - name: llmsim
    type: openai
    max_concurrency: 64
    openai: {base_url: %s/v1, max_fan_out: 64}
routes:
  - name: chat
    operation: chat
    backend: llmsim
    model: sim-chat
    batching: {min_batch_size: 1, max_batch_size: 32, window: 2ms, max_wait: 20ms}
    batch_api: {max_requests: %d, poll_min: %s, poll_max: %s, create_timeout: %s}
    price: {input_per_mtok: %g, output_per_mtok: %g, batch_discount: 0.5}
`, simURL, maxRequests, pollMin, pollMax, createTimeout, priceIn, priceOut)
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// createBatchJob creates a job of n chat items dispatched through the batch
// API, custom ids req-0 to req-(n-1); pad, when positive, makes each
// item's message about pad bytes long.
func createBatchJob(t *testing.T, c batcherv1.JobServiceClient, n, pad int) string {
	t.Helper()
	st, err := c.CreateJob(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{
		Name: "batch-api", Model: "chat", Dispatch: jobs.DispatchBatchAPI}}}); err != nil {
		t.Fatal(err)
	}
	filler := ""
	if pad > 0 {
		filler = " " + strings.Repeat("lorem ipsum ", pad/12)
	}
	per := 1000
	if pad > 0 {
		per = max(1, min(1000, (2<<20)/pad)) // stay under gRPC's 4 MiB a message
	}
	for start := 0; start < n; start += per {
		items := &batcherv1.JobItems{}
		for i := start; i < min(n, start+per); i++ {
			items.OpenaiLines = append(items.OpenaiLines, &batcherv1.OpenAIBatchLine{Line: fmt.Appendf(nil,
				`{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"item %d%s"}],"max_tokens":8}}`, i, i, filler)})
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

// exactlyOnceAcross reads a job's results.jsonl and errors.jsonl and fails
// unless each of req-0 to req-(n-1) is on exactly one line of the two; it
// returns the lines of each.
func exactlyOnceAcross(t *testing.T, dataDir, id string, n int) (results, errs int) {
	t.Helper()
	seen := make([]uint8, n)
	extra := 0
	read := func(name string) int {
		f, err := os.Open(filepath.Join(jobs.JobDir(dataDir, id), name))
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		lines := 0
		for sc.Scan() {
			lines++
			var l struct {
				CustomID string `json:"custom_id"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s line %d: %v", name, lines, err)
			}
			i, err := strconv.Atoi(strings.TrimPrefix(l.CustomID, "req-"))
			if err != nil || i < 0 || i >= n || !strings.HasPrefix(l.CustomID, "req-") {
				extra++
				continue
			}
			if seen[i] < 255 {
				seen[i]++
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return lines
	}
	results, errs = read(jobs.ResultsFile), read(jobs.ErrorsFile)
	missing, twice := 0, 0
	for i, c := range seen {
		switch {
		case c == 0:
			missing++
			if missing <= 5 {
				t.Errorf("req-%d: on no line", i)
			}
		case c > 1:
			twice++
			if twice <= 5 {
				t.Errorf("req-%d: on %d lines", i, c)
			}
		}
	}
	if missing+twice+extra > 0 {
		t.Fatalf("%d custom ids missing, %d on more than one line, %d lines of no item (results %d, errors %d, items %d)",
			missing, twice, extra, results, errs, n)
	}
	return results, errs
}

// noneTwice fails when llmsim stored an input file under one name twice or
// created two batches with one job's chunk tags; it returns how many of
// each it holds.
func noneTwice(t *testing.T, sim *llmsim.Server) (files, batches int) {
	t.Helper()
	st := sim.BatchStats()
	for name, n := range st.FileNames {
		if n != 1 {
			t.Errorf("input file %s uploaded %d times", name, n)
		}
	}
	for tags, n := range st.Tags {
		if n != 1 {
			t.Errorf("upstream batch %s created %d times", tags, n)
		}
	}
	return len(st.FileNames), len(st.Tags)
}

// itemsFromEnv reads a test's item count from name, def when unset.
func itemsFromEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s: a positive number of items, got %q", name, v)
	}
	return n
}

// chunkSize is the upstream batch size of an n-item job: four batches for
// a small job, batches of 10,000 items for a large one.
func chunkSize(n int) int { return min(10_000, max(1, (n+3)/4)) }

// TestEndToEndBatchAPI runs a job through the batch API of llmsim, whose
// batches fail 1% and expire 1% of their lines, on SQLite and PostgreSQL:
// every custom id ends on exactly one line of results and errors, no file
// is uploaded twice and no batch created twice, the lines the upstream did
// not answer went to further upstream batches (few online), and cost plus
// saving is what the tokens cost online. BATCHER_BATCHAPI_ITEMS sets the size
// (default 2,000; issue 31's figure is 100,000).
func TestEndToEndBatchAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	n := itemsFromEnv(t, "BATCHER_BATCHAPI_ITEMS", 2000)
	bin := buildBatcherd(t)
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			sim := newBatchSim(t, llmsim.Config{ReplyTokens: 8, BatchTime: 200 * time.Millisecond,
				BatchFailRate: 0.01, BatchExpireRate: 0.01, Seed: 31})
			per := chunkSize(n)
			cfg := batchConfig(t, sim.URL, per, 20*time.Millisecond, 200*time.Millisecond, 0)
			dataDir := t.TempDir()
			args := []string{"--config", cfg, "--data-dir", dataDir}
			if store == "postgres" {
				args = append(args, "--job-store", "postgres", "--postgres-dsn", storetest.PostgresSchema(t))
			}
			d := startDaemon(t, bin, args...)
			c := d.client(t)
			start := time.Now()
			id := createBatchJob(t, c, n, 0)
			created := time.Since(start)
			last := watchUntil(t, c, id, terminal)
			wall := time.Since(start)
			if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != int64(n) {
				t.Fatalf("the job ended %v\n%s", last, d.logs)
			}
			results, errs := exactlyOnceAcross(t, dataDir, id, n)
			files, batches := noneTwice(t, sim.sim)
			// The lines failed or expired upstream go to further upstream
			// batches (at most three tries), then online.
			if want := (n + per - 1) / per; files != batches || batches < want {
				t.Errorf("%d input files and %d batches upstream, want as many of each, at least %d", files, batches, want)
			}
			bs := sim.sim.BatchStats()
			online := sim.sim.Stats().Chat - bs.Answered
			if bs.Lines < int64(n) || online > int64(n)/100+5 {
				t.Errorf("upstream batches ended %d lines and %d items ran online; want at least %d lines, few online", bs.Lines, online, n)
			}
			// Lines re-run online cost the online price: the saving is at
			// most half of what the tokens cost online.
			full := (float64(last.GetTokensIn())*priceIn + float64(last.GetTokensOut())*priceOut) / 1e6
			if sum := last.GetCostUsd() + last.GetSavingUsd(); math.Abs(sum-full) > 1e-6*full || last.GetSavingUsd() > full/2 || last.GetSavingUsd() < full*0.45 {
				t.Errorf("cost $%.6f and saving $%.6f; want them to add up to the online $%.6f, the saving just under half", last.GetCostUsd(), last.GetSavingUsd(), full)
			}
			t.Logf("%s: %d items in %d upstream batches (%d lines, %d failed or expired upstream and sent again): %d results, %d errors, %d ran online; cost $%.6f, saving $%.6f; created in %v, done in %v",
				store, n, batches, bs.Lines, bs.Lines-int64(n), results, errs, online, last.GetCostUsd(), last.GetSavingUsd(), created.Round(time.Millisecond), wall.Round(time.Millisecond))
		})
	}
}

// vmOf reads VmRSS and VmHWM of pid, in bytes.
func vmOf(pid int) (rss, hwm int64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q", k, v)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// rssPeaks are a process's largest RSS while the batch API uploaded, while
// it downloaded, and at any time.
type rssPeaks struct {
	upload, download, any int64
	samples               int
}

// sampleRSS samples pid's VmRSS every 20ms until stop closes, attributing
// each sample to the batch API's uploads and downloads under way then.
func sampleRSS(pid int, sim *batchSim, stop <-chan struct{}) <-chan rssPeaks {
	out := make(chan rssPeaks, 1)
	go func() {
		var p rssPeaks
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- p
				return
			case <-tick.C:
			}
			_, up := sim.calls(callUpload)
			_, down := sim.calls(callDownload)
			rss, _, err := vmOf(pid)
			if err != nil {
				continue // exited: the test reports it
			}
			p.samples++
			p.any = max(p.any, rss)
			if up > 0 {
				p.upload = max(p.upload, rss)
			}
			if down > 0 {
				p.download = max(p.download, rss)
			}
		}
	}()
	return out
}

// rssLimit is issue 31's bound on batcherd's RSS during upload and
// download.
const rssLimit = 256 << 20

// TestBatchAPIMillionRSS is issue 31's 1M-item figure, run only with
// BATCHER_BATCHAPI_MILLION=1 (BATCHER_BATCHAPI_MILLION_ITEMS sets another
// size): a job of a million items through llmsim's batch API, upstream
// batches of 50,000 (OpenAI's largest). batcherd's RSS stays at most 256
// MiB while it uploads and downloads, and the job's reported cost is half
// the online cost of its tokens, the other half its saving. With
// BATCHER_BATCHAPI_MILLION_KILL=1 batcherd is killed at the last chunk's
// create and restarted: the restarted process, which resumes every chunk,
// stays under the bound at all times.
func TestBatchAPIMillionRSS(t *testing.T) {
	if os.Getenv("BATCHER_BATCHAPI_MILLION") != "1" {
		t.Skip("set BATCHER_BATCHAPI_MILLION=1 to run the 1M-item figure")
	}
	n := itemsFromEnv(t, "BATCHER_BATCHAPI_MILLION_ITEMS", 1_000_000)
	kill := os.Getenv("BATCHER_BATCHAPI_MILLION_KILL") == "1"
	bin := buildBatcherd(t)
	sim := newBatchSim(t, llmsim.Config{ReplyTokens: 8, BatchTime: time.Second, Seed: 31})
	const per = 50_000
	cfg := batchConfig(t, sim.URL, per, 200*time.Millisecond, 2*time.Second, 0)
	dataDir := t.TempDir()
	args := []string{"--config", cfg, "--data-dir", dataDir}
	var g *gate
	if kill {
		// The last chunk's create: every chunk is claimed and uploaded,
		// the others created.
		g = sim.hold(callCreate, int64((n+per-1)/per), 0)
	}
	d := startDaemon(t, bin, args...)
	stop := make(chan struct{})
	peaks := sampleRSS(d.cmd.Process.Pid, sim, stop)
	c := d.client(t)
	start := time.Now()
	id := createBatchJob(t, c, n, 0)
	created := time.Since(start)
	_, hwmCreated, _ := vmOf(d.cmd.Process.Pid)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	if kill {
		select {
		case <-g.arrived:
		case err := <-d.exited:
			d.exited <- err
			t.Fatalf("batcherd exited before the last create: %v\n%s", err, d.logs)
		case <-time.After(30 * time.Minute):
			t.Fatalf("batcherd made no last create in 30 minutes\n%s", d.logs)
		}
		sim.settle()
		_, hwm, _ := vmOf(d.cmd.Process.Pid)
		d.kill()
		sim.unfreeze(g)
		close(stop)
		p := <-peaks
		t.Logf("killed at the last create after %v: upload peak %.0f MiB, any time %.0f MiB; VmHWM %.0f MiB",
			time.Since(start).Round(time.Second), mib(p.upload), mib(p.any), mib(hwm))
		d = startDaemon(t, bin, args...)
		stop = make(chan struct{})
		peaks = sampleRSS(d.cmd.Process.Pid, sim, stop)
		c = d.client(t)
	}
	last := watchLong(t, c, id, 30*time.Minute)
	wall := time.Since(start)
	_, hwm, err := vmOf(d.cmd.Process.Pid)
	close(stop)
	p := <-peaks
	if err != nil {
		t.Fatalf("batcherd's status: %v\n%s", err, d.logs)
	}
	if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != int64(n) {
		t.Fatalf("the job ended %v\n%s", last, d.logs)
	}
	exactlyOnceAcross(t, dataDir, id, n)
	files, batches := noneTwice(t, sim.sim)
	t.Logf("%d items, %d files, %d batches: created in %v, done in %v", n, files, batches, created.Round(time.Second), wall.Round(time.Second))
	t.Logf("batcherd RSS: upload peak %.0f MiB, download peak %.0f MiB, any time %.0f MiB (%d samples); VmHWM %.0f MiB after create, %.0f MiB at the end",
		mib(p.upload), mib(p.download), mib(p.any), p.samples, mib(hwmCreated), mib(hwm))
	if (p.upload == 0 && !kill) || p.download == 0 {
		t.Errorf("no RSS sample during upload (%d) or download (%d)", p.upload, p.download)
	}
	if p.upload > rssLimit || p.download > rssLimit || (kill && p.any > rssLimit) {
		t.Errorf("RSS over %d MiB: upload %.0f MiB, download %.0f MiB, any time %.0f MiB", rssLimit>>20, mib(p.upload), mib(p.download), mib(p.any))
	}
	checkHalfPrice(t, dataDir, id, last)
}

// watchLong watches a job until it ends, within timeout.
func watchLong(t *testing.T, c batcherv1.JobServiceClient, id string, timeout time.Duration) *batcherv1.JobProgress {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
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
		if last = r.GetProgress(); terminal(last) {
			return last
		}
	}
}

// checkHalfPrice checks that a job dispatched wholly through the batch API
// reports half the online cost of its tokens as its cost, and the other
// half as its saving, in JobProgress and summary.json.
func checkHalfPrice(t *testing.T, dataDir, id string, last *batcherv1.JobProgress) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(jobs.JobDir(dataDir, id), jobs.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var sum jobs.Summary
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	online := (float64(last.GetTokensIn())*priceIn + float64(last.GetTokensOut())*priceOut) / 1e6
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }
	t.Logf("tokens in %d, out %d: online $%.6f; reported cost $%.6f, saving $%.6f; summary.json cost $%.6f, saving $%.6f",
		last.GetTokensIn(), last.GetTokensOut(), online, last.GetCostUsd(), last.GetSavingUsd(), sum.Cost, sum.Saving)
	if online == 0 || !near(last.GetCostUsd(), online/2) || !near(last.GetSavingUsd(), online/2) {
		t.Errorf("JobProgress: cost $%.6f, saving $%.6f; want half of $%.6f each", last.GetCostUsd(), last.GetSavingUsd(), online)
	}
	if sum.TokensIn != last.GetTokensIn() || sum.TokensOut != last.GetTokensOut() || !near(sum.Cost, online/2) || !near(sum.Saving, online/2) {
		t.Errorf("summary.json: tokens %d/%d, cost $%.6f, saving $%.6f; want tokens %d/%d and half of $%.6f each",
			sum.TokensIn, sum.TokensOut, sum.Cost, sum.Saving, last.GetTokensIn(), last.GetTokensOut(), online)
	}
}
