package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSampler(t *testing.T) *telemetry.Sampler {
	t.Helper()
	n := 0
	s := telemetry.NewSampler(telemetry.Sources{
		Lanes: func() []batcher.LaneStats {
			n++
			return []batcher.LaneStats{{Name: "m@be", Route: "m", Backend: "be", Queued: map[string]int{"normal": n}}}
		},
		Backends: func() []batcher.BackendStats { return []batcher.BackendStats{{Name: "be", Limit: 4}} },
	}, 10*time.Millisecond, 0)
	return s
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestPageIsSelfContained(t *testing.T) {
	s := New(Config{Sampler: newSampler(t)})
	rec := get(t, s, "/")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := rec.Body.String()
	for _, id := range []string{`id="lanes"`, `id="backends"`, `id="jobs"`, `id="chart-tput"`, `id="chart-lat"`, `new EventSource("events")`} {
		if !strings.Contains(body, id) {
			t.Errorf("the page lacks %s", id)
		}
	}
	// No external resource: no CDN, nothing the machine cannot reach.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(body); m != "" {
		t.Errorf("the page loads an external resource: %s", m)
	}
	if get(t, s, "/nope").Code != http.StatusNotFound {
		t.Error("/nope answered")
	}
}

func TestEndpoints(t *testing.T) {
	sampler := newSampler(t)
	sampler.Sample(time.Now())
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "m 1\n") })
	on := New(Config{Sampler: sampler, Metrics: metrics, Pprof: true})
	off := New(Config{Sampler: sampler})
	if rec := get(t, on, "/metrics"); rec.Body.String() != "m 1\n" {
		t.Errorf("/metrics: %q", rec.Body.String())
	}
	if get(t, off, "/metrics").Code != http.StatusNotFound {
		t.Error("/metrics answered without a handler")
	}
	if get(t, on, "/debug/pprof/").Code != http.StatusOK || get(t, off, "/debug/pprof/").Code != http.StatusNotFound {
		t.Error("pprof not behind its flag")
	}
	var snap telemetry.Snapshot
	if err := json.Unmarshal(get(t, on, "/api/snapshot").Body.Bytes(), &snap); err != nil || len(snap.Lanes) != 1 || snap.Backends[0].Limit != 4 {
		t.Errorf("/api/snapshot: %+v, %v", snap, err)
	}
	if get(t, on, "/healthz").Code != http.StatusOK {
		t.Error("/healthz not ok")
	}
	on.Close()
	if get(t, on, "/healthz").Code != http.StatusServiceUnavailable {
		t.Error("/healthz ok after Close")
	}
}

// TestEventsStreamSnapshotsUntilClose reads the event stream over a real
// HTTP connection: history first, then new snapshots as the sampler takes
// them; Close ends the stream.
func TestEventsStreamSnapshotsUntilClose(t *testing.T) {
	sampler := newSampler(t)
	sampler.Sample(time.Now()) // a history of two at least
	sampler.Start()
	defer sampler.Stop()
	s := New(Config{Sampler: sampler})
	srv := httptest.NewServer(s)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var events []string
	var queued []int
	event := ""
	for sc.Scan() && len(queued) < 4 {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			events = append(events, event)
		case strings.HasPrefix(line, "data: ") && event == "history":
			var hist []telemetry.Snapshot
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &hist); err != nil || len(hist) == 0 {
				t.Fatalf("history %q: %v", line, err)
			}
			for i, h := range hist {
				if last := i == len(hist)-1; (len(h.Lanes) == 0) == last {
					t.Errorf("history[%d] of %d has %d lanes: only the newest is whole", i, len(hist), len(h.Lanes))
				}
			}
		case strings.HasPrefix(line, "data: ") && event == "snapshot":
			var snap telemetry.Snapshot
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &snap); err != nil {
				t.Fatal(err)
			}
			queued = append(queued, snap.Lanes[0].Queued["normal"])
		}
	}
	if events[0] != "history" {
		t.Errorf("first event %q, want history", events[0])
	}
	for i := 1; i < len(queued); i++ {
		if queued[i] <= queued[i-1] {
			t.Errorf("snapshots not new: %v", queued)
		}
	}
	s.Close()
	// The stream ends: the scanner reaches EOF.
	for sc.Scan() {
	}
	if ctx.Err() != nil {
		t.Fatal("the event stream did not end on Close")
	}
}
