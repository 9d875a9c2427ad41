package main

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/telemetry"
)

// batcher.jobs has a series for every state a job can be in, named as the
// jobs package names it, and counts a job in each: a completed job is not
// lost to a label that no job ever has.
func TestJobsGaugeHasEveryJobState(t *testing.T) {
	var js []telemetry.Job
	for _, s := range jobs.States() {
		js = append(js, telemetry.Job{ID: s.String(), State: s.String()})
	}
	if len(js) < 9 {
		t.Fatalf("jobs.States() = %d states, want every state after unspecified", len(js))
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	if _, err := telemetry.RegisterLive(mp, telemetry.Sources{Jobs: func() []telemetry.Job { return js }, JobStates: jobStateNames()}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "batcher.jobs" {
			continue
		}
		for _, p := range m.Data.(metricdata.Gauge[int64]).DataPoints {
			v, _ := p.Attributes.Value("batcher.job.state")
			got[v.AsString()] = p.Value
		}
	}
	for _, s := range jobs.States() {
		if got[s.String()] != 1 {
			t.Errorf("batcher.jobs{batcher.job.state=%q} = %d, want 1 (series %v)", s, got[s.String()], got)
		}
	}
	if len(got) != len(jobs.States()) {
		t.Errorf("batcher.jobs has series %v, want one per job state", got)
	}
}
