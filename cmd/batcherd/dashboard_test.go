package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// promQLWords are PromQL's keywords and functions, and Grafana's
// template functions: identifiers in a query that name no series.
var promQLWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum min max avg count stddev stdvar topk bottomk quantile count_values group
		by without on ignoring group_left group_right bool and or unless offset
		rate irate increase delta idelta deriv histogram_quantile clamp_min clamp_max abs ceil floor round
		sort sort_desc time vector scalar label_replace label_join absent absent_over_time
		avg_over_time max_over_time min_over_time sum_over_time count_over_time last_over_time
		label_values inf nan`) {
		promQLWords[w] = true
	}
}

var (
	identRE   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	quotedRE  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	varRE     = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
	rangeRE   = regexp.MustCompile(`\[[0-9]+[smhdwy]\]`)
	numberRE  = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?\b`)
	durationR = regexp.MustCompile(`\b[0-9]+[smhdwy]\b`)
)

// queries returns every PromQL expression of a Grafana dashboard: the
// panels' targets (rows' nested panels too) and the query variables.
func queries(t *testing.T, dash map[string]any) []string {
	t.Helper()
	var out []string
	var walk func(ps []any)
	walk = func(ps []any) {
		for _, p := range ps {
			pm, _ := p.(map[string]any)
			for _, tg := range asSlice(pm["targets"]) {
				if e, _ := tg.(map[string]any)["expr"].(string); e != "" {
					out = append(out, e)
				}
			}
			walk(asSlice(pm["panels"]))
		}
	}
	walk(asSlice(dash["panels"]))
	tmpl, _ := dash["templating"].(map[string]any)
	for _, v := range asSlice(tmpl["list"]) {
		vm, _ := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		switch q := vm["query"].(type) {
		case string:
			out = append(out, q)
		case map[string]any:
			if s, _ := q["query"].(string); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// seriesNames returns the series names a family exports: the family for
// counters and gauges, its _bucket, _sum and _count for histograms.
func seriesNames(fams map[string]*familyInfo) (metrics, labels map[string]bool) {
	metrics, labels = map[string]bool{}, map[string]bool{"le": true}
	for name, f := range fams {
		metrics[name] = true
		if f.histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				metrics[name+s] = true
			}
		}
		for l := range f.labels {
			labels[l] = true
		}
	}
	return metrics, labels
}

// TestGrafanaDashboardQueriesExportedMetrics scrapes a real batcherd
// under load and checks that every query of deploy/grafana/batcher.json
// names at least one series it exports, and nothing that is neither an
// exported series nor one of their labels.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "batcher.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	qs := queries(t, dash)
	if len(qs) < 20 {
		t.Fatalf("only %d queries found in the dashboard", len(qs))
	}

	// With a data dir, so that the jobs panels' series exist.
	o := startObserved(t, "--stats-interval=100ms", "--data-dir="+t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	wait := load(ctx, t, o.addr, 4)
	wait()
	cancel()
	// One rejection, so that the rejected counter has a series.
	c, err := client.Dial(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(t.Context(), client.Embed("no-such-model", "x")); err == nil {
		t.Fatal("an unknown model was accepted")
	}
	_ = c.Close()
	// A job run to its end, so that the jobs' counters have series.
	conn, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	jc := batcherv1.NewJobServiceClient(conn)
	if p := watchUntil(t, jc, createChatJob(t, jc, 8, 4), terminal); p.GetCounts().GetSucceeded() != 8 {
		t.Fatalf("the job ended %v, want 8 succeeded", p)
	}
	_ = conn.Close()
	fams := scrape(t, o.admin)
	metrics, labels := seriesNames(fams)
	o.shutdown(t)
	checkHelp(t, fams)

	for _, q := range qs {
		// A gauge's derivative misreads a job deleted or finished as work
		// undone; the counters batcher_job_tasks_total and
		// batcher_job_task_tokens_total are for rate().
		if strings.Contains(q, "deriv(") {
			t.Errorf("query %q: deriv() of a gauge; rate() a counter instead", q)
		}
		clean := quotedRE.ReplaceAllString(q, `""`)
		clean = varRE.ReplaceAllString(clean, " ")
		clean = rangeRE.ReplaceAllString(clean, " ")
		clean = durationR.ReplaceAllString(clean, " ")
		clean = numberRE.ReplaceAllString(clean, " ")
		named := 0
		for _, id := range identRE.FindAllString(clean, -1) {
			switch {
			case promQLWords[id]:
			case metrics[id]:
				named++
			case labels[id]:
			default:
				t.Errorf("query %q: %q is neither a series batcherd exports nor one of their labels", q, id)
			}
		}
		if named == 0 {
			t.Errorf("query %q names no series batcherd exports", q)
		}
	}
}

// TestPrometheusScrapesBatcherd runs the real Prometheus with
// deploy/prometheus.yml (its target pointed at a batcherd under load, its
// interval shortened) and queries a few series through its HTTP API.
func TestPrometheusScrapesBatcherd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Prometheus")
	}
	prom := requireTool(t, "prometheus", "prometheus")
	o := startObserved(t)
	lctx, lcancel := context.WithCancel(t.Context())
	wait := load(lctx, t, o.addr, 4)
	defer func() {
		lcancel()
		wait()
		o.shutdown(t)
	}()

	cfg, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.ReplaceAll(string(cfg), "127.0.0.1:9464", o.admin)
	conf = strings.ReplaceAll(conf, "scrape_interval: 15s", "scrape_interval: 1s")
	if conf == string(cfg) || !strings.Contains(conf, o.admin) {
		t.Fatal("deploy/prometheus.yml no longer targets 127.0.0.1:9464")
	}
	dir := t.TempDir()
	confFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	webAddr := lis.Addr().String()
	_ = lis.Close() // Prometheus takes the port over
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prom, "--config.file="+confFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+webAddr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			t.Logf("prometheus stopped: %v", err) // by the signal: its status says nothing
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Logf("prometheus killed: %v", <-exited)
		}
	}()

	query := func(q string) (int, error) {
		resp, err := http.Get("http://" + webAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
			return 0, fmt.Errorf("query %q: %s", q, body)
		}
		return len(r.Data.Result), nil
	}
	// Each query must come back with series once Prometheus has scraped a
	// few times: waited for with a ticker, bounded by the test's timeout.
	want := []string{
		`sum(rate(batcher_requests_completed_total{batcher_outcome="ok"}[5s])) > 0`,
		`histogram_quantile(0.95, sum by (le) (rate(batcher_request_duration_seconds_bucket[5s])))`,
		`batcher_queue_depth{batcher_route="chat",batcher_priority="urgent"}`,
		`batcher_breaker_state{batcher_backend="sim",batcher_breaker_state="closed"} == 1`,
		`sum(rate(batcher_upstream_requests_total[5s])) / sum(rate(batcher_upstream_calls_total[5s])) > 1`,
		`up{job="batcherd"} == 1`,
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	pending := append([]string(nil), want...)
	var lastErr error
	for len(pending) > 0 {
		select {
		case <-tick.C:
		case err := <-exited:
			t.Fatalf("prometheus exited: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("prometheus never answered %q (last error %v)\n%s", pending, lastErr, logs.String())
		}
		var still []string
		for _, q := range pending {
			n, err := query(q)
			if err != nil {
				lastErr = err
			}
			if n == 0 {
				still = append(still, q)
			}
		}
		pending = still
	}
	t.Logf("prometheus answered %d queries over batcherd's series", len(want))
}

// otelNameRE matches a dotted OTel name (batcher.job.tasks,
// gen_ai.token.type): not what a Prometheus reader sees.
var otelNameRE = regexp.MustCompile(`\b[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*(\.[a-z0-9_]+)*\b`)

// checkHelp: every family batcherd defines has a help text, and none names
// an instrument or attribute by its OTel name, which a Prometheus reader
// does not see (batcher_job_items' once said "rate() batcher.job.tasks
// instead", meaning batcher_job_tasks_total). Families of the Go and
// process collectors are theirs.
func checkHelp(t *testing.T, fams map[string]*familyInfo) {
	t.Helper()
	for name, f := range fams {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			continue
		}
		if f.help == "" {
			t.Errorf("%s: no help text", name)
		}
		if m := otelNameRE.FindString(f.help); m != "" {
			t.Errorf("%s: help %q names %q by its OTel name", name, f.help, m)
		}
	}
}
