package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// gapBackend wraps a backend and keeps the longest spell between two
// dispatches.
type gapBackend struct {
	batcher.Backend
	mu     sync.Mutex
	last   time.Time
	maxGap time.Duration
}

func (g *gapBackend) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	now := time.Now()
	g.mu.Lock()
	if !g.last.IsZero() {
		g.maxGap = max(g.maxGap, now.Sub(g.last))
	}
	g.last = now
	g.mu.Unlock()
	return g.Backend.Dispatch(ctx, b, out)
}

// UpstreamCalls passes the openai backend's count on.
func (g *gapBackend) UpstreamCalls(route string, op batcher.Operation, n int) int {
	if uc, ok := g.Backend.(batcher.UpstreamCaller); ok {
		return uc.UpstreamCalls(route, op, n)
	}
	return 1
}

// BenchmarkBudgetLLMSim is issue 15's case in real time, over HTTP on
// loopback: batcher with an openai backend in front of llmsim, which allows
// 600 requests a minute (a bucket of 600 refilling 10 a second), 8
// concurrent calls and 200 ms a call; 200 callers send 24,000 distinct
// single-text embedding requests; native batches of 20. The maximum by
// time T is 20 × min(600 + 10·T, 40·T) requests (the initial burst
// counted). A run takes about 65 s: set BATCHER_SLOW_BENCH=1.
func BenchmarkBudgetLLMSim(b *testing.B) {
	if os.Getenv("BATCHER_SLOW_BENCH") == "" {
		b.Skip("set BATCHER_SLOW_BENCH=1: a run takes about 65s")
	}
	const requests, callers = 24000, 200
	for _, tc := range []struct {
		name string
		rpm  int
	}{{"untold", 0}, {"told-rpm-default-burst", 600}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				sim, err := llmsim.New(llmsim.Config{Latency: 200 * time.Millisecond, MaxConcurrency: 8, RPM: 600, EmbeddingDim: 8})
				if err != nil {
					b.Fatal(err)
				}
				ts := httptest.NewServer(sim)
				be, err := openai.New(openai.Config{BaseURL: ts.URL + "/v1"})
				if err != nil {
					b.Fatal(err)
				}
				gaps := &gapBackend{Backend: be}
				core, err := batcher.New(
					batcher.WithBackend(batcher.BackendConfig{Name: "llmsim", Backend: gaps, MaxConcurrency: 8, RPM: tc.rpm}),
					batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "llmsim", Model: "sim-embedding",
						Batch: batcher.BatchConfig{MaxBatchSize: 20}}),
					batcher.WithQueueCapacity(requests),
					batcher.WithQueueTimeout(10*time.Minute),
				)
				if err != nil {
					b.Fatal(err)
				}
				var next, failed atomic.Int64
				var firstErr atomic.Value
				start := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > requests {
								return
							}
							_, err := core.Do(context.Background(), &batcher.Request{Route: "embed",
								Input: batcher.Input{Op: batcher.OpEmbedding, Text: fmt.Sprint("document ", i)}})
							if err != nil {
								failed.Add(1)
								firstErr.CompareAndSwap(nil, err)
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				if err := core.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				_ = be.Close()
				st := sim.Stats()
				sim.Close()
				ts.Close()
				t := elapsed.Seconds()
				most := 20 * min(600+10*t, 40*t)
				ok := float64(requests - failed.Load())
				b.ReportMetric(ok/most, "of-max")
				b.ReportMetric(most, "max-req")
				b.ReportMetric(ok/t, "req/s")
				b.ReportMetric(float64(failed.Load()), "errors")
				b.ReportMetric(100*float64(st.RateLimited)/float64(max(st.Requests, 1)), "429-%")
				b.ReportMetric(gaps.maxGap.Seconds(), "max-gap-s")
				if e := firstErr.Load(); e != nil {
					b.Logf("first error: %v", e)
				}
			}
		})
	}
}
