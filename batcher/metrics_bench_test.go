package batcher

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/internal/cputime"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
)

// BenchmarkMetricsRecording measures what the core's metrics add to one
// request: its admission, its result, and its share of a batch of 16's
// upstream call, recorded into an SDK MeterProvider with one reader and
// exemplars off, as batcherd sets it up: with its MetricsProducer
// (metrics=producer, the histograms counted by the core), or
// without (metrics=sdk, every histogram recorded through the SDK). With
// metrics off the same calls are nil checks.
func BenchmarkMetricsRecording(b *testing.B) {
	for _, mode := range []string{"off", "sdk", "producer"} {
		b.Run("metrics="+mode, func(b *testing.B) {
			var opts []Option
			if mode != "off" {
				var readerOpts []sdkmetric.ManualReaderOption
				if mode == "producer" {
					p := NewMetricsProducer()
					readerOpts = append(readerOpts, sdkmetric.WithProducer(p))
					opts = append(opts, WithMetricsProducer(p))
				}
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader(readerOpts...)), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				opts = append(opts, WithMeterProvider(mp))
			}
			bt, err := New(append([]Option{
				WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}}),
				WithRoute(Route{Name: "m", Op: OpChat, Backend: "be"}),
			}, opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = bt.Shutdown(context.Background()) }()
			rc := (*bt.routes.Load())["m"]
			req := &Request{Route: "m", Priority: PriorityHigh}
			c := &Call{req: req, b: bt, rc: rc}
			res := &Result{Backend: "be", Usage: Usage{PromptTokens: 10, CompletionTokens: 20},
				Timings: Timings{BatchWait: time.Millisecond, Queued: 2 * time.Millisecond, Total: 30 * time.Millisecond}}
			run := &batchRun{be: rc.targets[0].be, lane: &lane{route: rc}, batch: Batch{Route: "m"}} // dispatched reads the lane's route and target
			used := cost{requests: 1, tokens: 480}
			out := make([]Response, 16)
			for i := range out {
				out[i].Usage = Usage{PromptTokens: 10, CompletionTokens: 20}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cputime.Process()
			for i := 0; b.Loop(); i++ {
				var err error
				bt.metrics.submitted(req, &c, &err)
				bt.metrics.finished(c, res)
				if i%16 == 0 {
					bt.metrics.dispatched(run, out, 30*time.Millisecond, nil, used)
				}
			}
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
