package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/cputime"
)

// telemetryModes builds the two envs the metrics benchmarks compare: off,
// no MeterProvider anywhere (the core records nothing, otelgrpc a no-op);
// on, batcherd's set-up (telemetry.Setup): an SDK MeterProvider with one
// reader, the Prometheus exporter, and exemplars off, given to the core
// and, as the global provider, to otelgrpc.
func telemetryModes(b *testing.B, run func(b *testing.B, opts ...envOption)) {
	prev := otel.GetMeterProvider()
	defer otel.SetMeterProvider(prev)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", map[bool]string{false: "off", true: "on"}[on]), func(b *testing.B) {
			opts := []envOption{withConcurrency(64), withBatch(batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 32})}
			if !on {
				otel.SetMeterProvider(noop.NewMeterProvider())
				run(b, opts...)
				return
			}
			exp, err := otelprom.New(otelprom.WithRegisterer(prometheus.NewRegistry()), otelprom.WithoutScopeInfo())
			if err != nil {
				b.Fatal(err)
			}
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			defer func() { _ = mp.Shutdown(b.Context()) }()
			otel.SetMeterProvider(mp)
			run(b, append(opts, withCore(batcher.WithMeterProvider(mp)))...)
		})
	}
}

// BenchmarkSubmitMetrics is BenchmarkSubmit with metrics off and on.
func BenchmarkSubmitMetrics(b *testing.B) {
	telemetryModes(b, func(b *testing.B, opts ...envOption) {
		e := newEnv(b, newFake(), opts...)
		ctx := testCtx(b)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cputime.Process()
		b.RunParallel(func(pb *testing.PB) {
			req := &batcherv1.SubmitRequest{Request: chatReq("", "hello")}
			for pb.Next() {
				if _, err := e.client.Submit(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkStreamMetrics is BenchmarkStream with metrics off and on.
func BenchmarkStreamMetrics(b *testing.B) {
	telemetryModes(b, func(b *testing.B, opts ...envOption) {
		e := newEnv(b, newFake(), opts...)
		s := e.openStream(b, testCtx(b))
		s.send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}))
		msgs := make([]*batcherv1.SubmitStreamRequest, b.N)
		for i := range msgs {
			msgs[i] = reqMsg(chatReq(fmt.Sprint(i), "hello"))
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cputime.Process()
		go func() {
			for _, m := range msgs {
				if err := s.Send(m); err != nil {
					return
				}
			}
			_ = s.CloseSend()
		}()
		done := 0
		for done < b.N {
			m, err := s.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if m.GetCompletion() != nil {
				done++
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		if _, err := s.drain(); err != nil {
			b.Fatal(err)
		}
	})
}
