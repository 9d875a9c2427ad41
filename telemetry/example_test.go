package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/telemetry"
)

// A log handler that puts the active span's ids on every record.
func ExampleNewLogHandler() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == "trace_id" || a.Key == "span_id" {
			a.Value = slog.StringValue("…") // varying values, elided for the example
		}
		return a
	}})
	log := slog.New(telemetry.NewLogHandler(h))
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("example").Start(context.Background(), "work")
	defer span.End()
	log.InfoContext(ctx, "upstream answered 429", "backend", "openai")
	// Output: time=… level=INFO msg="upstream answered 429" backend=openai trace_id=… span_id=…
}

// A sampler over a core: the snapshot the status page and WatchStats show.
func ExampleSampler() {
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "be", MaxConcurrency: 4, Backend: batcher.BackendFunc(
			func(context.Context, *batcher.Batch, []batcher.Response) error { return nil })}),
		batcher.WithRoute(batcher.Route{Name: "m", Op: batcher.OpEmbedding, Backend: "be"}),
	)
	if err != nil {
		panic(err)
	}
	defer func() { _ = core.Shutdown(context.Background()) }()
	s := telemetry.NewSampler(telemetry.Sources{Lanes: core.Lanes, Backends: core.Stats, Limits: core.BackendLimits}, time.Second, 0)
	snap := s.Sample(time.Now())
	b := snap.Backends[0]
	fmt.Println(b.Name, b.Breaker, b.InFlight, "/", b.Limit, "lanes:", len(snap.Lanes))
	// Output: be closed 0 / 4 lanes: 0
}
