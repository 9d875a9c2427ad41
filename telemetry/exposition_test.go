package telemetry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"

	"github.com/batcherhq/batcher/batcher"
)

// TestExpositionSameThroughTheProducer serves the same requests from a
// core built with CoreOptions (its histograms counted for the
// MetricsProducer) and from one that records everything through the SDK,
// and checks that the Prometheus exposition of the core's metrics is the
// same but for order: every family's name, type, help and label sets,
// every histogram's bucket bounds and count, every counter's and gauge's
// value. Sums and bucket counts of durations are left out: they are
// times.
func TestExpositionSameThroughTheProducer(t *testing.T) {
	tel, err := Setup(t.Context(), Config{NoPrometheus: true, LookupEnv: env(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	hand := exposition(t, tel.Gatherer, tel.CoreOptions()...)

	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	sdk := exposition(t, reg, batcher.WithMeterProvider(mp))

	if len(sdk) == 0 {
		t.Fatal("no series through the SDK")
	}
	for _, k := range slices.Sorted(maps.Keys(sdk)) {
		if hand[k] != sdk[k] {
			t.Errorf("%s: %q with the producer, want the SDK's %q", k, hand[k], sdk[k])
		}
	}
	for k := range hand {
		if _, ok := sdk[k]; !ok {
			t.Errorf("%s: with the producer only", k)
		}
	}
}

// exposition runs requests through a core built with opts and returns the
// core's series that g gathers, each as a key (family, type, help,
// labels) mapped to what the test compares of its value.
func exposition(t *testing.T, g prometheus.Gatherer, opts ...batcher.Option) map[string]string {
	t.Helper()
	be := batcher.BackendFunc(func(_ context.Context, bt *batcher.Batch, out []batcher.Response) error {
		for i := range out {
			if bt.Requests[i].Input.Prompt == "fail" {
				out[i].Err = &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "no"}
				continue
			}
			out[i].Text = "ok"
			out[i].Usage = batcher.Usage{PromptTokens: 3, CompletionTokens: int32(len(bt.Requests))}
		}
		return nil
	})
	core, err := batcher.New(append(opts,
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpCompletion, Backend: "be", Batch: batcher.BatchConfig{MaxBatchSize: 4}}))...)
	if err != nil {
		t.Fatal(err)
	}
	for i, prompt := range []string{"a", "b", "fail", "c"} {
		_, _ = core.Do(t.Context(), &batcher.Request{Route: "m", Priority: batcher.Priority(i % 3), Input: batcher.Input{Op: batcher.OpCompletion, Prompt: prompt}})
	}
	_, _ = core.Do(t.Context(), &batcher.Request{Route: "nope", Priority: batcher.PriorityNormal})
	if err := core.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "batcher_") && !strings.HasPrefix(f.GetName(), "gen_ai_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(labels)
			key := fmt.Sprintf("%s %s %q {%s}", f.GetName(), f.GetType(), f.GetHelp(), strings.Join(labels, ","))
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				v := fmt.Sprintf("count %d bounds %v", h.GetSampleCount(), bounds)
				if !strings.HasSuffix(f.GetName(), "_seconds") { // not a time: all of it
					var counts []uint64
					for _, b := range h.GetBucket() {
						counts = append(counts, b.GetCumulativeCount())
					}
					v += fmt.Sprintf(" sum %v counts %v", h.GetSampleSum(), counts)
				}
				out[key] = v
			case dto.MetricType_COUNTER:
				out[key] = fmt.Sprint(m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				out[key] = fmt.Sprint(m.GetGauge().GetValue())
			default:
				out[key] = m.String()
			}
		}
	}
	return out
}
