package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b), 1e-12) }

// TestJobCost: a job through the batch API costs half what the same
// tokens cost online (batch_discount 0.5), an online job the full price;
// each result line, summary.json, the job's progress and
// batcher_cost_total carry it; batcher_job_tasks_total and
// batcher_job_task_tokens_total count the tasks and the progress's tokens.
// batcher_upstream_batch_api_* count the batch-API job's upstream batches
// and requests, not the online job's.
func TestJobCost(t *testing.T) {
	price := jobs.Price{InputPerMTok: 2.5, OutputPerMTok: 10, BatchDiscount: 0.5}
	for _, st := range batchStores {
		t.Run(st.name, func(t *testing.T) {
			e := newBatchEnv(t, st.open, llmsim.Config{BatchTime: 20 * time.Millisecond, Seed: 3})
			e.pg = st.pg
			reader := sdkmetric.NewManualReader()
			e.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			e.prices = map[string]jobs.Price{"chat": price}
			m, _ := e.manager(t, nil)
			const n = 150
			byMode := map[string]float64{}
			var tokIn, tokOut int64
			for _, mode := range []string{jobs.DispatchBatchAPI, jobs.DispatchOnline} {
				j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: mode}, n)
				p := waitJob(t, m, j.ID)
				if p.State != jobs.StateCompleted || p.Counts.Succeeded != n {
					t.Fatalf("%s: ended %s %+v", mode, p.State, p.Counts)
				}
				online := (float64(p.TokensIn)*price.InputPerMTok + float64(p.TokensOut)*price.OutputPerMTok) / 1e6
				want, saving := online, 0.0
				if mode == jobs.DispatchBatchAPI {
					want, saving = online/2, online/2
				}
				if online == 0 || !near(p.Cost, want) || !near(p.Saving, saving) {
					t.Errorf("%s: progress cost %v saving %v over %d+%d tokens; want %v and %v (online %v)",
						mode, p.Cost, p.Saving, p.TokensIn, p.TokensOut, want, saving, online)
				}
				byMode[mode] = p.Cost
				tokIn, tokOut = tokIn+p.TokensIn, tokOut+p.TokensOut
				var lines float64
				for _, l := range readLines(t, filepath.Join(m.Dir(j), "results.jsonl")) {
					if l.Dispatch != mode || l.Cost == nil {
						t.Fatalf("%s: a result line says dispatch %q cost %v", mode, l.Dispatch, l.Cost)
					}
					lines += *l.Cost
				}
				if !near(lines, want) {
					t.Errorf("%s: the result lines' costs add up to %v, want %v", mode, lines, want)
				}
				b, err := os.ReadFile(filepath.Join(m.Dir(j), "summary.json"))
				if err != nil {
					t.Fatal(err)
				}
				var s jobs.Summary
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatal(err)
				}
				if !near(s.Cost, want) || !near(s.Saving, saving) {
					t.Errorf("%s: summary.json cost %v saving %v, want %v and %v", mode, s.Cost, s.Saving, want, saving)
				}
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			tasks, tokens := map[string]int64{}, map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					switch mt.Name {
					case "batcher.job.tasks", "batcher.job.task.tokens":
						for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
							route, _ := dp.Attributes.Value("batcher.route")
							if route.AsString() != "chat" {
								t.Errorf("%s for route %q", mt.Name, route.AsString())
							}
							if mt.Name == "batcher.job.tasks" {
								state, _ := dp.Attributes.Value("batcher.job.task.state")
								tasks[state.AsString()] += dp.Value
							} else {
								typ, _ := dp.Attributes.Value("gen_ai.token.type")
								tokens[typ.AsString()] += dp.Value
							}
						}
					}
					if mt.Name != "batcher.cost" {
						continue
					}
					for _, dp := range mt.Data.(metricdata.Sum[float64]).DataPoints {
						route, _ := dp.Attributes.Value("batcher.route")
						mode, _ := dp.Attributes.Value("batcher.dispatch")
						if route.AsString() != "chat" {
							t.Errorf("batcher.cost for route %q", route.AsString())
						}
						got[mode.AsString()] += dp.Value
					}
				}
			}
			if len(tasks) != 1 || tasks["succeeded"] != 2*n {
				t.Errorf("batcher.job.tasks by state = %v, want succeeded %d", tasks, 2*n)
			}
			if tokens["input"] != tokIn || tokens["output"] != tokOut {
				t.Errorf("batcher.job.task.tokens = %v, want input %d output %d (the jobs' progress)", tokens, tokIn, tokOut)
			}
			for mode, want := range byMode {
				if !near(got[mode], want) {
					t.Errorf("batcher.cost{dispatch=%s} = %v, want %v", mode, got[mode], want)
				}
			}
			// The batch-API job's upstream batches and their requests are
			// counted by backend; the online job's calls are not (the
			// core counts those).
			up := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					if !strings.HasPrefix(mt.Name, "batcher.upstream.batch_api.") {
						continue
					}
					for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
						be, _ := dp.Attributes.Value("batcher.backend")
						route, _ := dp.Attributes.Value("batcher.route")
						up[mt.Name+"{"+be.AsString()+","+route.AsString()+"}"] += dp.Value
					}
				}
			}
			if b, r := up["batcher.upstream.batch_api.batches{llmsim,chat}"], up["batcher.upstream.batch_api.requests{llmsim,chat}"]; b < 2 || r != n || len(up) != 2 {
				t.Errorf("batch-API counters %v: want at least 2 batches (of at most 100) carrying the %d requests on llmsim/chat", up, n)
			}
		})
	}
}

// TestPriceValidate: a bad price table is refused, naming the field.
func TestPriceValidate(t *testing.T) {
	for _, tc := range []struct {
		p    jobs.Price
		want string
	}{
		{jobs.Price{InputPerMTok: -1}, "input_per_mtok"},
		{jobs.Price{OutputPerMTok: math.NaN()}, "output_per_mtok"},
		{jobs.Price{BatchDiscount: 1.5}, "batch_discount"},
		{jobs.Price{BatchDiscount: -0.1}, "batch_discount"},
	} {
		err := tc.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.p, err, tc.want)
		}
	}
	if err := (jobs.Price{InputPerMTok: 1, OutputPerMTok: 2, BatchDiscount: 0.5}).Validate(); err != nil {
		t.Errorf("a good price: %v", err)
	}
}

// TestUpstreamProgress: while a job's items wait in upstream batches its
// progress shows them, the batches by provider state and an ETA from the
// provider's progress; at the end every batch is completed and none waits.
func TestUpstreamProgress(t *testing.T) {
	e := newBatchEnv(t, openSQLite, llmsim.Config{BatchTime: 3 * time.Second, Seed: 5})
	m, _ := e.manager(t, nil)
	const n = 200 // two upstream batches of 100
	j := createChat(t, m, jobs.Spec{Model: "chat", Dispatch: jobs.DispatchBatchAPI}, n)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var seen *jobs.UpstreamProgress
	var eta time.Duration
	errSeen := errors.New("seen")
	err := m.Watch(ctx, j.ID, 20*time.Millisecond, func(p jobs.Progress) error {
		if u := p.Upstream; u != nil && u.Items == n && u.Batches["in_progress"] == 2 && u.ETA > 0 && u.ETA <= 4*time.Second {
			seen, eta = u, p.ETA
			return errSeen
		}
		return nil
	})
	if !errors.Is(err, errSeen) {
		// llmsim takes 3s a batch; its times are whole seconds, as OpenAI's.
		t.Fatalf("Watch: %v; never saw %d items in 2 in-progress batches with an ETA within 4s", err, n)
	}
	if eta < seen.ETA {
		t.Errorf("upstream ETA %v, job ETA %v: want the job's at least the upstream's", seen.ETA, eta)
	}
	p := waitJob(t, m, j.ID)
	if p.State != jobs.StateCompleted || p.Upstream == nil || p.Upstream.Items != 0 || p.Upstream.Batches["completed"] != 2 || len(p.Upstream.Batches) != 1 {
		t.Fatalf("ended %s with upstream %+v; want completed, 2 completed batches, none waiting", p.State, p.Upstream)
	}
	// An online job has no upstream progress.
	p2, _, err := m.Progress(t.Context(), createChat(t, m, jobs.Spec{Model: "chat"}, 1).ID)
	if err != nil || p2.Upstream != nil {
		t.Errorf("an online job's upstream progress: %+v (%v), want none", p2.Upstream, err)
	}
}

// TestCancelledBacklogCountedOnItsRoute: tasks a job's pacer held in its
// backlog when it was cancelled are counted in batcher_job_tasks_total on
// their route, like those cancelled in flight, not on a route "".
func TestCancelledBacklogCountedOnItsRoute(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, func(c *jobs.Config) { c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)) })
	// One request a second: the first starts, the next ones wait in the
	// backlog for the pacer.
	j := e.create(t, jobs.Spec{Model: "chat", RPM: 60, ConcurrentRequests: 8}, 20)
	ctx := t.Context()
	// Watched as env.wait watches a job; errFirst stops it at the first
	// success.
	errFirst := errors.New("an item succeeded")
	if err := e.m.Watch(ctx, j.ID, 20*time.Millisecond, func(p jobs.Progress) error {
		if p.Counts.Succeeded > 0 {
			return errFirst
		}
		if p.State.Terminal() {
			t.Fatalf("the job ended %s before an item succeeded", p.State)
		}
		return nil
	}); !errors.Is(err, errFirst) {
		t.Fatalf("watching for a first success: %v", err)
	}
	if _, err := e.m.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.wait(t, j.ID); p.State != jobs.StateCancelled || p.Counts.Cancelled == 0 {
		t.Fatalf("ended %s %+v, want cancelled items", p.State, p.Counts)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byRoute := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != "batcher.job.tasks" {
				continue
			}
			for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
				route, _ := dp.Attributes.Value("batcher.route")
				state, _ := dp.Attributes.Value("batcher.job.task.state")
				byRoute[route.AsString()+"/"+state.AsString()] += dp.Value
			}
		}
	}
	if byRoute["chat/cancelled"] == 0 || len(byRoute) != 2 {
		t.Errorf("batcher.job.tasks by route/state = %v, want chat/succeeded and chat/cancelled only", byRoute)
	}
}
