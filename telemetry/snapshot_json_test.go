package telemetry

import (
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// The snapshot's JSON, which dashboards read, has snake_case names, and
// durations in seconds under names that say so; it reads back unchanged.
func TestSnapshotJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	snap := Snapshot{
		Time:     at,
		Lanes:    []Lane{{Name: "chat/sim", Route: "chat", Backend: "sim", Queued: map[string]int{"urgent": 1}, InFlight: 2}},
		Backends: []Backend{{Name: "sim", Breaker: "closed", InFlight: 1, Limit: 4, MaxConcurrency: 8, RPMLimit: 60, RPMMax: 60, RPMUsed: 12, Calls: 3, Items: 9}},
		Streams:  Streams{Open: 1, Buffered: 5},
		Jobs: []Job{{ID: "j1", Name: "n", State: "running", Total: 10, Succeeded: 4, Failed: 2, ItemsPerSec: 2, ETA: 3 * time.Second,
			Cost: 0.25, Saving: 0.125}},
		Requests: Requests{Admitted: 7, PerSec: 1.5, P50: 250 * time.Millisecond, P95: time.Second, P99: 2 * time.Second},
		Fleet: &Fleet{Self: "r1", Redis: true, Replicas: []Replica{{ID: "r1", Self: true, Info: map[string]string{"grpc": "x"}}},
			Budgets: []FleetBudget{{Backend: "sim", Factor: 1, PausedUntil: at, RPMLeft: 3, RPMUsed: 4, Leases: map[string]int{"R-1": 2}}}},
	}
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snake.MatchString(k) {
					t.Errorf("%s.%s: not a snake_case name", path, k)
				}
				switch k {
				case "queued", "info", "leases": // maps keyed by data: priorities, info keys, replica ids
					continue
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("", tree)
	req := tree["requests"].(map[string]any)
	for k, want := range map[string]float64{"latency_p50_seconds": 0.25, "latency_p95_seconds": 1, "latency_p99_seconds": 2, "completed_per_second": 1.5, "admitted": 7} {
		if req[k] != want {
			t.Errorf("requests.%s = %v, want %v", k, req[k], want)
		}
	}
	// A job's counts are named as batcherctl names them (done: every item
	// that ended), and its cost and saving are there.
	job := tree["jobs"].([]any)[0].(map[string]any)
	for k, want := range map[string]float64{"eta_seconds": 3, "succeeded": 4, "failed": 2, "done": 6, "total": 10, "cost_usd": 0.25, "saving_usd": 0.125} {
		if job[k] != want {
			t.Errorf("jobs[0].%s = %v, want %v", k, job[k], want)
		}
	}
	if tree["time"] != "2026-01-02T03:04:05Z" {
		t.Errorf("time = %v, want RFC 3339", tree["time"])
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, snap) {
		t.Errorf("read back %+v\nwant %+v", back, snap)
	}
}

// TestSnapshotListsNeverNull: an idle batcherd's snapshot (no lanes, no
// jobs) has empty lists, not nulls, in its JSON: a dashboard iterates them.
func TestSnapshotListsNeverNull(t *testing.T) {
	s := NewSampler(Sources{
		Lanes:    func() []batcher.LaneStats { return nil },
		Backends: func() []batcher.BackendStats { return nil },
		Jobs:     func() []Job { return nil },
	}, time.Second, 0)
	defer s.Stop()
	b, err := json.Marshal(s.Sample(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lanes", "backends", "jobs"} {
		if l, ok := tree[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %#v, want [] in %s", k, tree[k], b)
		}
	}
}
