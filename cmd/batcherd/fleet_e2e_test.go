package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/batcherhq/batcher/fleet/fleettest"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/llmsim"
)

// The fleet's end-to-end test: three batcherd processes share one llmsim's
// 600 RPM through Redis, with 200 callers spread over them.
//
// Its windows are scaled for make test: the steady phase lasts 20 s and is
// checked over every 10 s window (the rate plus the fleet's burst of one
// second's allowance); BATCHER_FLEET_SOAK=3m (make fleet-soak) runs it for
// that long and checks every 60 s window against the limit plus 2%, the
// issue's figure, which BENCHMARKS.md reports.
const (
	fleetRPM   = 600
	fleetBurst = fleetRPM / 60 // the core's default burst: one second's allowance
	fleetTPM   = 200_000       // enforced by llmsim, not binding: RPM binds here
)

// upstreamLog is llmsim behind a recorder of every completion call: when
// it started, its status, the tokens it used.
type upstreamLog struct {
	*httptest.Server
	mu    sync.Mutex
	calls []upstreamCall
}

type upstreamCall struct {
	at     time.Time
	status int
	tokens int
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
func (r *statusRecorder) Write(p []byte) (int, error) {
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

func newUpstreamLog(t *testing.T) *upstreamLog {
	t.Helper()
	// BATCHER_FLEET_SOAK_LATENCY slows the upstream so that the fleet's
	// concurrency (8 slots), not its rate, binds: 700ms allows 11.4 calls a
	// second against the rate's 10, so every burst waits for a slot.
	latency := 20 * time.Millisecond
	if s := os.Getenv("BATCHER_FLEET_SOAK_LATENCY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("BATCHER_FLEET_SOAK_LATENCY: %v", err)
		}
		latency = d
	}
	sim, err := llmsim.New(llmsim.Config{ReplyTokens: 8, Latency: latency, RPM: fleetRPM, TPM: fleetTPM})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstreamLog{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/completions") {
			sim.ServeHTTP(w, r)
			return
		}
		at := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		sim.ServeHTTP(rec, r)
		var body struct {
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(rec.body.Bytes(), &body)
		u.mu.Lock()
		u.calls = append(u.calls, upstreamCall{at, rec.status, body.Usage.TotalTokens})
		u.mu.Unlock()
	}))
	t.Cleanup(func() { sim.Close(); u.Close() })
	return u
}

// between returns the calls that started in [from, to).
func (u *upstreamLog) between(from, to time.Time) []upstreamCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []upstreamCall
	for _, c := range u.calls {
		if !c.at.Before(from) && c.at.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

// worstWindow returns the most calls and tokens within any window w of
// calls (sorted by start).
func worstWindow(calls []upstreamCall, w time.Duration) (reqs, tokens int) {
	sort.Slice(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
	j, tok := 0, 0
	for i, c := range calls {
		tok += c.tokens
		for c.at.Sub(calls[j].at) >= w {
			tok -= calls[j].tokens
			j++
		}
		reqs, tokens = max(reqs, i-j+1), max(tokens, tok)
	}
	return reqs, tokens
}

func count429(calls []upstreamCall) int {
	n := 0
	for _, c := range calls {
		if c.status == http.StatusTooManyRequests {
			n++
		}
	}
	return n
}

func fleetConfig(t *testing.T, upstreamURL, redisAddr, prefix string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "batcherd.yaml")
	cfg := fmt.Sprintf(`
queue_capacity: 5000
fleet:
  redis_url: redis://%s/0
  prefix: %s
  heartbeat: 200ms
  ttl: 1s
backends:
  - name: llmsim
    type: openai
    max_concurrency: 8
    rpm: %d
    rpm_burst: %d                # llmsim's limit header says 600: keep the fleet's burst at 1 s
    tpm: %d
    openai: {base_url: %s/v1}
routes:
  - {name: completion, operation: completion, backend: llmsim, model: sim-completion, batching: {max_batch_size: 10, window: 20ms}}
`, redisAddr, prefix, fleetRPM, fleetBurst, fleetTPM, upstreamURL)
	if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// callers runs n callers per replica, each calling Submit in a loop until
// stop; errs counts the failures of each replica's callers.
type callers struct {
	wg   sync.WaitGroup
	stop chan struct{}
	ok   []atomic.Int64
	errs []atomic.Int64
	mu   sync.Mutex
	last []error
	once sync.Once
}

func startCallers(t *testing.T, addrs []string, total int) *callers {
	t.Helper()
	c := &callers{stop: make(chan struct{}), ok: make([]atomic.Int64, len(addrs)), errs: make([]atomic.Int64, len(addrs)), last: make([]error, len(addrs))}
	clients := make([]batcherv1.BatcherServiceClient, len(addrs))
	for i, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients[i] = batcherv1.NewBatcherServiceClient(conn)
	}
	for k := range total {
		r := k % len(addrs)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-c.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				_, err := clients[r].Submit(ctx, &batcherv1.SubmitRequest{Request: &batcherv1.Request{
					Id: fmt.Sprintf("c%d-%d", k, i), Model: "completion",
					Input:  &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: "Once upon a time"}},
					Params: &batcherv1.GenerationParams{MaxTokens: proto.Int32(16)},
				}})
				cancel()
				if err != nil {
					c.errs[r].Add(1)
					c.mu.Lock()
					c.last[r] = err
					c.mu.Unlock()
					hold(100 * time.Millisecond) // a killed replica's callers must not spin
					continue
				}
				c.ok[r].Add(1)
			}
		}()
	}
	return c
}

func (c *callers) end() { c.once.Do(func() { close(c.stop) }); c.wg.Wait() }

// leasesOf counts the leases in Redis held by the replica with process id
// pid (a replica's default id is host-pid-random).
func leasesOf(t *testing.T, addr, prefix string, pid int) int {
	t.Helper()
	rc := fleettest.Client(addr)
	defer func() { _ = rc.Close() }()
	ms, err := rc.ZRange(context.Background(), "{"+prefix+":b:llmsim}:l", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if strings.Contains(m, fmt.Sprintf("-%d-", pid)) {
			n++
		}
	}
	return n
}

func members(t *testing.T, addr, prefix string) int {
	t.Helper()
	rc := fleettest.Client(addr)
	defer func() { _ = rc.Close() }()
	n, err := rc.ZCard(context.Background(), prefix+":members").Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// adminAddr returns the admin listener's address from a daemon's logs.
func adminAddr(t *testing.T, d *daemon) string {
	t.Helper()
	for _, line := range strings.Split(d.logs.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "admin listening" {
			return rec.Addr
		}
	}
	t.Fatalf("no admin listener logged:\n%s", d.logs)
	return ""
}

// roundTrips sums a replica's batcher_fleet_round_trips by operation, from
// its /metrics.
func roundTrips(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "batcher_fleet_round_trips") {
			continue
		}
		_, rest, ok := strings.Cut(line, `batcher_fleet_op="`)
		if !ok {
			continue
		}
		op, rest, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(rest)
		var v float64
		_, _ = fmt.Sscan(fields[len(fields)-1], &v)
		out[op] += v
	}
	return out
}

// statusFleet reads the fleet from a replica's status page API.
func statusFleet(t *testing.T, admin string) *struct {
	Self     string
	Redis    bool
	Replicas []struct{ ID string }
	Budgets  []struct {
		Backend string
		Leases  map[string]int
	}
} {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/api/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var snap struct {
		Fleet *struct {
			Self     string
			Redis    bool
			Replicas []struct{ ID string }
			Budgets  []struct {
				Backend string
				Leases  map[string]int
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		t.Fatal(err)
	}
	return snap.Fleet
}

// poll waits for cond with a generous deadline: the state it looks at is
// in Redis or another process, with no event to wait on.
func poll(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > testTimeout {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// hold lets the load run for d: a measurement's length, not a wait for an
// event.
func hold(d time.Duration) { <-time.NewTimer(d).C }

func TestFleetEndToEnd(t *testing.T) {
	addr := fleettest.Redis(t)
	prefix := fleettest.Prefix(t, addr)
	steady, window, slack := 20*time.Second, 10*time.Second, fleetBurst
	if s := os.Getenv("BATCHER_FLEET_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("BATCHER_FLEET_SOAK: %v", err)
		}
		steady, window, slack = d, time.Minute, fleetRPM*2/100
	}
	bin := buildBatcherd(t)
	up := newUpstreamLog(t)
	var ds []*daemon
	var addrs []string
	pxs := fleettest.Proxies(t, addr, 3)
	for _, px := range pxs {
		d := startDaemon(t, bin, "--config", fleetConfig(t, up.URL, px.Addr(), prefix))
		ds, addrs = append(ds, d), append(addrs, d.addr)
	}
	poll(t, "three replicas in the fleet", func() bool { return members(t, addr, prefix) == 3 })

	admins := []string{adminAddr(t, ds[0]), adminAddr(t, ds[1]), adminAddr(t, ds[2])}
	tripsAt := func() (n float64) {
		for _, a := range admins {
			for op, v := range roundTrips(t, a) {
				if op != "heartbeat" {
					n += v
				}
			}
		}
		return n
	}
	tripsStart, start := tripsAt(), time.Now()
	cs := startCallers(t, addrs, 200)
	defer cs.end()
	// Warm up (the queues fill, llmsim's initial burst is not ours to
	// spend), then measure.
	hold(3 * time.Second)
	trips0 := tripsAt()
	from := time.Now()
	hold(steady)
	to := time.Now()
	tripsEnd := tripsAt()
	calls := up.between(from, to)
	rtPerBatch := (tripsEnd - trips0) / float64(len(calls))
	// From the first call: the warm-up's burst, when 200 callers start at
	// once and the fleet's slots, not its rate, bind, included.
	rtWhole := (tripsEnd - tripsStart) / float64(len(up.between(start, to)))
	t.Logf("Redis round trips a batch (bookings and releases, heartbeats aside): %.2f steady, %.2f from the first call (the warm-up's burst included)", rtPerBatch, rtWhole)
	for _, rt := range []float64{rtPerBatch, rtWhole} {
		// Two are the design; a batch booked but not yet released at
		// either end of the span may count one over.
		if rt < 1.5 || rt > 2.2 {
			t.Errorf("%.2f Redis round trips a batch; two are the design (a booking and a release, no polls)", rt)
		}
	}
	if f := statusFleet(t, admins[0]); f == nil || len(f.Replicas) != 3 || !f.Redis || len(f.Budgets) != 1 || f.Budgets[0].Backend != "llmsim" {
		t.Errorf("the status page's fleet: %+v", f)
	}
	reqs, toks := worstWindow(calls, window)
	perWindow := int(float64(fleetRPM) * window.Minutes())
	used := float64(len(calls)) / (to.Sub(from).Minutes() * fleetRPM)
	t.Logf("steady %v: %d upstream calls, %.3f of the provider's maximum; worst %v window %d requests (limit %d) and %d tokens (limit %d); %d 429s",
		steady, len(calls), used, window, reqs, perWindow, toks, int(fleetTPM*window.Minutes()), count429(calls))
	if reqs > perWindow+slack {
		t.Errorf("%d upstream requests within %v: the limit is %d (plus %d)", reqs, window, perWindow, slack)
	}
	if toks > int(fleetTPM*window.Minutes()*1.02) {
		t.Errorf("%d tokens within %v: the limit is %d", toks, window, int(fleetTPM*window.Minutes()))
	}
	if n := count429(calls); n*100 > len(calls) {
		t.Errorf("%d of %d upstream calls got 429: more than 1%%", n, len(calls))
	}
	if used < 0.8 {
		t.Errorf("the fleet used %.2f of the provider's maximum; want near all of it", used)
	}

	// Kill one replica: its leases come back within the TTL, the others
	// take over its share.
	victim := ds[2]
	pid := victim.cmd.Process.Pid
	victim.kill()
	killed := time.Now()
	back := poll(t, "the killed replica's leases to expire", func() bool { return leasesOf(t, addr, prefix, pid) == 0 })
	poll(t, "two replicas", func() bool { return members(t, addr, prefix) == 2 })
	t.Logf("killed replica's leases gone %v after the kill (TTL 1s)", back.Round(10*time.Millisecond))
	if back > 5*time.Second {
		t.Errorf("the killed replica's leases took %v to come back; the TTL is 1s", back)
	}
	hold(5 * time.Second)
	after := up.between(killed.Add(2*time.Second), time.Now())
	if rate := float64(len(after)) / time.Since(killed.Add(2*time.Second)).Minutes(); rate < 0.7*fleetRPM {
		t.Errorf("two replicas sent %.0f RPM after the third died; they should take over its share of %d", rate, fleetRPM)
	}

	// Redis away for 10 s: nothing fails, the local shares hold the rate.
	for _, px := range pxs[:2] {
		px.Cut()
	}
	cut := time.Now()
	hold(10 * time.Second)
	for _, px := range pxs[:2] {
		px.Restore()
	}
	restored := time.Now()
	during := up.between(cut, restored)
	// Each replica keeps 1/N of the rate and of the burst; add what was
	// booked ahead and in flight when Redis went (at most the
	// concurrency, 8 a replica).
	bound := int(fleetRPM*restored.Sub(cut).Minutes()) + fleetBurst + 16
	t.Logf("without Redis for %v: %d upstream calls (bound %d), %d 429s", restored.Sub(cut).Round(time.Millisecond), len(during), bound, count429(during))
	if len(during) > bound {
		t.Errorf("%d upstream calls in %v without Redis: the local shares allow %d", len(during), restored.Sub(cut), bound)
	}
	poll(t, "the replicas to rejoin", func() bool {
		return strings.Contains(ds[0].logs.String(), "Redis reachable again") && strings.Contains(ds[1].logs.String(), "Redis reachable again")
	})
	if !strings.Contains(ds[0].logs.String(), "fleet: Redis unreachable") {
		t.Errorf("no log line said Redis was unreachable:\n%s", ds[0].logs)
	}
	hold(3 * time.Second)
	cs.end()
	for r := range 2 {
		if n := cs.errs[r].Load(); n > 0 {
			t.Errorf("replica %d's callers: %d errors (%d ok), e.g. %v", r, n, cs.ok[r].Load(), cs.last[r])
		}
	}
	t.Logf("callers: %d, %d ok; the killed replica's %d ok, %d ended by the kill",
		cs.ok[0].Load(), cs.ok[1].Load(), cs.ok[2].Load(), cs.errs[2].Load())
}
