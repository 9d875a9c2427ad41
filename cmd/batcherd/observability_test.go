package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// obsConfig is a quick sim with two backends, so that the figures of more
// than one backend show.
const obsConfig = `
backends:
  - name: sim
    type: sim
    max_concurrency: 4
    rpm: 600000
    tpm: 100000000
    sim: {base_latency: 5ms, per_token: 0s}
  - name: spare
    type: sim
    sim: {base_latency: 5ms, per_token: 0s}
routes:
  - name: chat
    operation: chat
    backend: sim
    fallbacks: [{backend: spare}]
    batching: {max_batch_size: 16, window: 5ms}
  - name: embed
    operation: embedding
    backend: sim
    batching: {max_batch_size: 32, window: 5ms}
`

// observed is a batcherd run in-process for the observability tests.
type observed struct {
	addr, admin string // gRPC and admin host:port
	stop        func()
	exit        <-chan int
	logs        *logScanner
}

func startObserved(t *testing.T, args ...string) *observed {
	t.Helper()
	cfgFile := filepath.Join(t.TempDir(), "batcherd.yaml")
	if err := os.WriteFile(cfgFile, []byte(obsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, stop, exit, logs := startInProcess(t, append([]string{"--config", cfgFile, "--listen=127.0.0.1:0", "--stats-interval=200ms"}, args...)...)
	o := &observed{addr: addr, stop: stop, exit: exit, logs: logs}
	// "admin listening" is logged before "listening".
	logs.mu.Lock()
	for _, line := range logs.lines {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "admin listening" {
			o.admin = rec.Addr
		}
	}
	logs.mu.Unlock()
	if o.admin == "" {
		t.Fatalf("no admin listener logged:\n%s", logs)
	}
	return o
}

// shutdown stops batcherd and checks that it exits 0.
func (o *observed) shutdown(t *testing.T) {
	t.Helper()
	o.stop()
	if code := <-o.exit; code != exitOK {
		t.Errorf("exit %d, want 0:\n%s", code, o.logs)
	}
}

// load sends requests of every priority from workers goroutines, unary
// and over a stream, until ctx ends. It returns once they have all
// stopped, with the number of completions.
func load(ctx context.Context, t *testing.T, addr string, workers int) (wait func() int64) {
	t.Helper()
	c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	prios := []batcherv1.Priority{batcherv1.Priority_PRIORITY_URGENT, batcherv1.Priority_PRIORITY_HIGH,
		batcherv1.Priority_PRIORITY_NORMAL, batcherv1.Priority_PRIORITY_LOW}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var req *batcherv1.Request
				if i%3 == 0 {
					req = client.Embed("embed", fmt.Sprintf("text %d-%d", w, i))
				} else {
					req = client.Chat("chat", client.User(fmt.Sprintf("prompt %d-%d", w, i)), client.WithPriority(prios[(w+i)%len(prios)]))
				}
				if _, err := c.Submit(ctx, req); err == nil {
					done.Add(1)
				}
			}
		}()
	}
	return func() int64 {
		wg.Wait()
		_ = c.Close()
		return done.Load()
	}
}

// scrape returns the metric families batcherd exports.
func scrape(t *testing.T, admin string) map[string]*familyInfo {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	out := map[string]*familyInfo{}
	for name, f := range fams {
		fi := &familyInfo{labels: map[string]map[string]bool{}}
		for _, m := range f.GetMetric() {
			fi.series++
			switch {
			case m.GetCounter() != nil:
				fi.sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				fi.sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				fi.sum += float64(m.GetHistogram().GetSampleCount())
			}
			for _, l := range m.GetLabel() {
				if fi.labels[l.GetName()] == nil {
					fi.labels[l.GetName()] = map[string]bool{}
				}
				fi.labels[l.GetName()][l.GetValue()] = true
			}
		}
		fi.histogram = f.GetType().String() == "HISTOGRAM"
		fi.help = f.GetHelp()
		out[name] = fi
	}
	return out
}

type familyInfo struct {
	series    int
	sum       float64 // counters and gauges: the values' sum; histograms: the count
	histogram bool
	labels    map[string]map[string]bool
	help      string
}

func TestMetricsUnderLoad(t *testing.T) {
	o := startObserved(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	wait := load(ctx, t, o.addr, 8)
	// Scrape while the load runs, then after.
	mid := scrape(t, o.admin)
	n := wait()
	cancel()
	if n == 0 {
		t.Fatal("no request completed")
	}
	after := scrape(t, o.admin)
	for _, name := range []string{
		"batcher_requests_admitted_total", "batcher_requests_completed_total",
		"batcher_request_duration_seconds", "batcher_request_queue_wait_seconds", "batcher_batch_wait_seconds",
		"batcher_batch_size", "batcher_batch_fill_ratio", "batcher_upstream_calls_total", "batcher_upstream_requests_total",
		"batcher_upstream_calls_saved_total", "gen_ai_client_operation_duration_seconds", "gen_ai_client_token_usage",
		"batcher_budget_requests_used_total", "batcher_budget_tokens_used_total",
	} {
		f := after[name]
		if f == nil {
			t.Errorf("%s: not exported", name)
			continue
		}
		if f.sum <= 0 {
			t.Errorf("%s: nothing recorded under load", name)
		}
	}
	for _, name := range []string{"batcher_queue_depth", "batcher_breaker_state", "batcher_backend_rpm_limit_per_min", "batcher_backend_tpm_limit_per_min", "batcher_backend_rpm_max_per_min",
		"batcher_streams_open", "batcher_retries_total", "batcher_fallbacks_total", "batcher_dedup_hits_total", "batcher_upstream_rate_limited_total"} {
		if after[name] == nil {
			t.Errorf("%s: not exported", name)
		}
	}
	var during float64
	if f := mid["batcher_requests_completed_total"]; f != nil {
		during = f.sum
	}
	if got := after["batcher_requests_completed_total"].sum; got < during || got < float64(n) {
		t.Errorf("completed %v after the load, %v during, %d seen by the clients", got, during, n)
	}

	// otelgrpc reports to the same provider now.
	var rpc bool
	for name := range after {
		if strings.HasPrefix(name, "rpc_server_") {
			rpc = true
		}
	}
	if !rpc {
		t.Error("no rpc_server_* metric: otelgrpc does not report to batcherd's MeterProvider")
	}
	// Cardinality: every label value comes from the configuration or a
	// fixed set; no request's text shows.
	for name, f := range after {
		for label, vals := range f.labels {
			for v := range vals {
				if strings.Contains(v, "prompt") || strings.Contains(v, "text ") {
					t.Errorf("%s{%s=%q}: a request's content as a label value", name, label, v)
				}
			}
			if len(vals) > 20 && label != "le" && label != "quantile" {
				t.Errorf("%s: label %s has %d values", name, label, len(vals))
			}
		}
	}
	o.shutdown(t)
}

// TestAccessLogCarriesTraceIDs: the access log has a record per call, at
// the configured level, carrying the caller's trace id.
func TestAccessLogCarriesTraceIDs(t *testing.T) {
	o := startObserved(t, "--access-log=warn")
	c, err := client.Dial(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if _, err := c.Submit(ctx, client.Embed("embed", "hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	o.shutdown(t)
	var found bool
	for _, line := range strings.Split(o.logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["grpc.method"] != "Submit" {
			continue
		}
		found = true
		if rec["level"] != "WARN" {
			t.Errorf("access log at %v, want WARN (--access-log=warn): %s", rec["level"], line)
		}
		if rec["trace_id"] != traceID {
			t.Errorf("access log trace_id %v, want the caller's %s: %s", rec["trace_id"], traceID, line)
		}
		if rec["grpc.code"] != "OK" {
			t.Errorf("access log code %v: %s", rec["grpc.code"], line)
		}
	}
	if !found {
		t.Fatalf("no access log record for Submit:\n%s", o.logs)
	}
}

// TestScrapeDuringShutdown scrapes /metrics over fresh connections while
// batcherd drains and stops: every scrape gets a whole exposition, or its
// connection is refused once the listener has closed. Nothing in between.
func TestScrapeDuringShutdown(t *testing.T) {
	o := startObserved(t)
	ctx, cancel := context.WithCancel(t.Context())
	wait := load(ctx, t, o.addr, 4)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var ok, refused int
	scrapeOnce := func() error {
		resp, err := hc.Get("http://" + o.admin + "/metrics")
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return fmt.Errorf("reading a scrape: %w", err)
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "batcher_queue_capacity") || !strings.HasSuffix(string(body), "\n") {
			return fmt.Errorf("scrape answered %s with %d bytes", resp.Status, len(body))
		}
		return nil
	}
	if err := scrapeOnce(); err != nil {
		t.Fatal(err)
	}
	go o.stop() // the signal: batcherd drains, then closes the admin listener
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		err := scrapeOnce()
		if err == nil {
			ok++
			continue
		}
		// Refused: the listener is gone. Or it closed with this connection
		// still in its accept queue: the kernel completed the handshake and
		// then resets it, which the client sees as a reset or as EOF before
		// any response. That is the listener closing only if the next dial
		// is refused; a live server dropping a connection fails here.
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
			break
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			if _, again := hc.Get("http://" + o.admin + "/metrics"); !errors.Is(again, syscall.ECONNREFUSED) {
				t.Fatalf("after %d good scrapes: %v, and the listener still answers (%v)", ok, err, again)
			}
			refused++
			break
		}
		t.Fatalf("after %d good scrapes: %v", ok, err)
	}
	cancel()
	wait()
	if code := <-o.exit; code != exitOK {
		t.Errorf("exit %d:\n%s", code, o.logs)
	}
	if refused == 0 {
		t.Fatalf("the admin listener never closed (%d scrapes answered)", ok)
	}
	t.Logf("%d scrapes answered during shutdown, then refused", ok)
}

func TestPprofBehindFlag(t *testing.T) {
	for _, on := range []bool{false, true} {
		o := startObserved(t, fmt.Sprintf("--pprof=%v", on))
		resp, err := http.Get("http://" + o.admin + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; resp.StatusCode != want {
			t.Errorf("--pprof=%v: /debug/pprof/cmdline %s, want %d", on, resp.Status, want)
		}
		o.shutdown(t)
	}
}

func TestWatchStatsOverGRPC(t *testing.T) {
	o := startObserved(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cc, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	lctx, lcancel := context.WithCancel(ctx)
	wait := load(lctx, t, o.addr, 4)
	ws, err := batcherv1.NewAdminServiceClient(cc).WatchStats(ctx, &batcherv1.WatchStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var first, last int64
	for i := 0; i < 50; i++ {
		m, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		s := m.GetSnapshot()
		if len(s.GetBackends()) != 2 || s.GetBackends()[0].GetName() != "sim" {
			t.Fatalf("backends %v", s.GetBackends())
		}
		if i == 0 {
			first = s.GetRequests().GetCompleted()
		}
		last = s.GetRequests().GetCompleted()
		if last > first && s.GetRequests().GetCompletedPerSecond() > 0 {
			break
		}
	}
	lcancel()
	wait()
	if last <= first {
		t.Fatalf("completed stayed at %d over the snapshots", first)
	}
	o.shutdown(t)
	if _, err := ws.Recv(); err == nil {
		t.Error("WatchStats still sending after shutdown")
	}
}

// TestFrontDoorMetricsWithoutTracing: /metrics measures the OpenAI front
// door by endpoint whether or not traces are exported (they are not here);
// it once did only when they were. Its server_address and server_port are
// the listen address's.
func TestFrontDoorMetricsWithoutTracing(t *testing.T) {
	o := startObserved(t)
	c := sdkClient(httpAddr(t, o.logs), "")
	if _, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}); err != nil {
		t.Fatalf("chat: %v", err)
	}
	f := scrape(t, o.admin)["http_server_request_duration_seconds"]
	if f == nil || f.sum != 1 {
		t.Fatalf("http_server_request_duration_seconds: %+v, want one call", f)
	}
	if routes := f.labels["http_route"]; len(routes) != 1 || !routes["/v1/chat/completions"] {
		t.Errorf("http_route values %v, want /v1/chat/completions", routes)
	}
	// The listen address, not a name: server_address="openai" it once was.
	host, port, err := net.SplitHostPort(httpAddr(t, o.logs))
	if err != nil {
		t.Fatal(err)
	}
	if a, p := f.labels["server_address"], f.labels["server_port"]; len(a) != 1 || !a[host] || len(p) != 1 || !p[port] {
		t.Errorf("server_address %v, server_port %v, want the listen address's %s and %s", a, p, host, port)
	}
	o.shutdown(t)
}
