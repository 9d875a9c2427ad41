package jobs

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestTwinMetricUnit: batcher.upstream_twins counts upstream batches, so
// by the OpenTelemetry conventions for counts its unit is the annotation
// {batch} (the Prometheus exporter drops it: the name stays
// batcher_upstream_twins_total).
func TestTwinMetricUnit(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tm, err := newTwinMetric(mp)
	if err != nil {
		t.Fatal(err)
	}
	tm.add("chat")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "batcher.upstream_twins" {
				if m.Unit != "{batch}" {
					t.Errorf("unit %q, want {batch}", m.Unit)
				}
				return
			}
		}
	}
	t.Fatal("batcher.upstream_twins not recorded")
}
