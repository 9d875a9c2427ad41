package main

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/telemetry"
	"github.com/batcherhq/batcher/telemetry/admin"
)

// requireTool returns the path of an outside tool (a Debian package), or
// skips the test with a note where it is absent, unless
// BATCHER_REQUIRE_TOOLS=1 (CI), where it fails.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("BATCHER_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s not installed (apt-get install -y %s) and BATCHER_REQUIRE_TOOLS=1", name, pkg)
		}
		t.Skipf("SKIP: %s not installed (apt-get install -y %s); set BATCHER_REQUIRE_TOOLS=1 to make this a failure", name, pkg)
	}
	return p
}

// artifactDir is where tests save artifacts: $BATCHER_ARTIFACTS when set,
// else the test's temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("BATCHER_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestStatusPageInChromium loads the status page in a real headless
// Chromium while batcherd serves load, and checks that it is live: the
// connection shows live, the completed count changes, lanes and both
// backends show with their gauges and breaker state, the charts draw, the
// jobs section says there are none. It saves a screenshot.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser := requireTool(t, "chromium", "chromium")
	o := startObserved(t)
	lctx, lcancel := context.WithCancel(t.Context())
	wait := load(lctx, t, o.addr, 8)
	defer func() {
		lcancel()
		wait()
		o.shutdown(t)
	}()

	ctx, closeBrowser := chromium(t, browser)
	defer closeBrowser()
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+o.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#backends .backend`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	// Each read is one evaluation: the page re-renders sections on every
	// event, so a node looked up first may be gone when its text is read.
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const n = document.querySelector(`+strconv.Quote(sel)+`); return n ? n.innerText : ""; })()`))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return v
	}
	first := text(`#completed`)
	// The numbers move: wait for the completed count to change, and for
	// lanes and a throughput to show.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => {
		const c = document.getElementById("completed").textContent;
		return c !== `+strconv.Quote(first)+` && c !== "–" &&
			document.querySelectorAll("#lanes tbody tr").length > 0 &&
			parseFloat(document.getElementById("throughput").textContent.replace(/,/g, "")) > 0 &&
			document.querySelectorAll("#chart-tput polyline").length > 0;
	})()`, chromedp.WithPollingTimeout(testTimeout))); err != nil {
		t.Fatalf("the page's numbers did not change from completed=%q: %v", first, err)
	}
	conn, second, backends, lanes, jobs, breaker := text(`#conn`), text(`#completed`), text(`#backends`),
		text(`#lanes tbody`), text(`#jobs-empty`), text(`#backends .badge`)
	gauges, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#backends .gauge").length`))
	if err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	if conn != "live" {
		t.Errorf("connection state %q, want live", conn)
	}
	n1, _ := strconv.Atoi(strings.ReplaceAll(first, ",", ""))
	n2, err := strconv.Atoi(strings.ReplaceAll(second, ",", ""))
	if err != nil || n2 <= n1 {
		t.Errorf("completed went from %q to %q", first, second)
	}
	for _, want := range []string{"sim", "spare", "calls"} {
		if !strings.Contains(backends, want) {
			t.Errorf("backends section lacks %q: %q", want, backends)
		}
	}
	if breaker != "closed" {
		t.Errorf("breaker badge %q, want closed", breaker)
	}
	if gauges != 6 { // concurrency, RPM and TPM for each of two backends
		t.Errorf("%d gauges, want 6", gauges)
	}
	if !strings.Contains(lanes, "chat@sim") && !strings.Contains(lanes, "embed@sim") {
		t.Errorf("lanes table lacks the live lanes: %q", lanes)
	}
	if jobs != "No jobs." {
		t.Errorf("jobs section %q, want the empty note", jobs)
	}
	shot := filepath.Join(artifactDir(t), "statuspage.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("status page screenshot: %s (%d bytes), completed %s -> %s", shot, len(png), first, second)
}

// TestStatusPageShowsJobCountsAndCost renders a job on the status page in
// Chromium: its counts named as batcherctl names them (done is every item
// that ended, succeeded or failed), and its cost and saving; and a
// backend's batch-API traffic beside its online calls.
func TestStatusPageShowsJobCountsAndCost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser := requireTool(t, "chromium", "chromium")
	reg := prometheus.NewRegistry()
	for name, n := range map[string]float64{"batcher_upstream_batch_api_batches_total": 5, "batcher_upstream_batch_api_requests_total": 300} {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, []string{"batcher_backend", "batcher_route"})
		reg.MustRegister(c)
		c.WithLabelValues("sim", "chat").Add(n)
	}
	sampler := telemetry.NewSampler(telemetry.Sources{
		Lanes:    func() []batcher.LaneStats { return nil },
		Backends: func() []batcher.BackendStats { return []batcher.BackendStats{{Name: "sim", Calls: 5, Items: 5}} },
		Jobs: func() []telemetry.Job {
			return []telemetry.Job{{ID: "job-1", Name: "nightly", State: "running", Total: 300, Succeeded: 240, Failed: 12,
				Cost: 1.5, Saving: 1.25}, {ID: "job-2", State: "cancelled", Total: 100, Succeeded: 60, Failed: 40, Cancelled: 30, Expired: 4}}
		},
		Metrics: reg,
	}, time.Second, 0)
	sampler.Sample(time.Now()) // not started: the page renders this one
	page := admin.New(admin.Config{Sampler: sampler})
	srv := httptest.NewServer(page)
	defer srv.Close()
	defer page.Close() // ends the page's event stream
	ctx, closeBrowser := chromium(t, browser)
	defer closeBrowser()

	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`[data-job="job-1"]`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	for sel, want := range map[string]string{
		`[data-job="job-1"] .job-counts`:  "252 / 300 done · 240 succeeded · 12 failed",
		`[data-job="job-2"] .job-counts`:  "100 / 100 done · 60 succeeded · 6 failed · 30 cancelled · 4 expired",
		`[data-job="job-1"] .job-cost`:    "cost $1.50 · saved $1.25",
		`[data-backend="sim"] .batch-api`: "batch API: batches 5 · requests 300 · per batch 60.0",
	} {
		got, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", sel, got, want)
		}
	}
}

// chromium returns a context of a headless Chromium at browser, bounded by
// testTimeout, and the func that closes it.
func chromium(t *testing.T, browser string) (context.Context, func()) {
	t.Helper()
	actx, acancel := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	)
	bctx, bcancel := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, testTimeout)
	return ctx, func() { cancel(); bcancel(); acancel() }
}
