package openai_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// The hot path against an instant llmsim on loopback: what Batcher and the
// backend cost per request, and how many upstream calls a request takes.
// Allocations include the in-process llmsim's. cmd/llmbench measures the
// same workloads against a rate-limited upstream.

func benchCore(b *testing.B, cfg openai.Config, route batcher.Route) (*llmsim.Server, *openai.Backend, *batcher.Batcher) {
	sim, url := startSim(b, llmsim.Config{EmbeddingDim: 16})
	cfg.BaseURL = url
	be := newBackend(b, cfg)
	route.Backend = "openai-main"
	core := newCore(b, []batcher.BackendConfig{{Name: "openai-main", Backend: be, MaxConcurrency: 8}}, []batcher.Route{route},
		batcher.WithQueueCapacity(1<<20))
	return sim, be, core
}

func runParallel(b *testing.B, core *batcher.Batcher, req func(i int) *batcher.Request) {
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := core.Do(context.Background(), req(i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
}

func BenchmarkEmbeddingsBatched(b *testing.B) {
	sim, _, core := benchCore(b, openai.Config{}, batcher.Route{Name: "emb", Op: batcher.OpEmbedding, Model: "sim-embedding",
		Batch: batcher.BatchConfig{MaxBatchSize: 100, Window: 2 * time.Millisecond}})
	runParallel(b, core, func(i int) *batcher.Request { return embedding("emb", "text "+strconv.Itoa(i)) })
	b.ReportMetric(float64(sim.Stats().Embeddings)/float64(b.N), "calls/op")
}

func BenchmarkChatFanOut(b *testing.B) {
	sim, _, core := benchCore(b, openai.Config{}, batcher.Route{Name: "chat", Op: batcher.OpChat, Model: "sim-chat",
		Batch: batcher.BatchConfig{MaxBatchSize: 10, Window: 2 * time.Millisecond}})
	runParallel(b, core, func(i int) *batcher.Request { return chat("chat", "question "+strconv.Itoa(i)) })
	b.ReportMetric(float64(sim.Stats().Chat)/float64(b.N), "calls/op")
}

func BenchmarkChatPacked(b *testing.B) {
	sim, _, core := benchCore(b, openai.Config{Pack: openai.PackConfig{Enabled: true, MaxItems: 10}},
		batcher.Route{Name: "chat", Op: batcher.OpChat, Model: "sim-chat", Batch: batcher.BatchConfig{MaxBatchSize: 10, Window: 2 * time.Millisecond}})
	runParallel(b, core, func(i int) *batcher.Request { return chat("chat", "question "+strconv.Itoa(i), "Be brief.") })
	b.ReportMetric(float64(sim.Stats().Chat)/float64(b.N), "calls/op")
}
