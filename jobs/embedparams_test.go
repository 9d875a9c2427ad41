package jobs_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// TestEmbeddingJobRefusesGenerationParams: a generation parameter an
// embedding job would run with, from its item, its spec's defaults or a
// run group, is refused when the job is created, naming where it came
// from: the core's rule (an embedding takes none) at every source, never
// an item that runs without it.
func TestEmbeddingJobRefusesGenerationParams(t *testing.T) {
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: &embedCounter{}, MaxConcurrency: 1}),
		batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "be",
			Batch: batcher.BatchConfig{MaxBatchSize: 8, MinBatchSize: 1, Window: time.Millisecond, MaxWait: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	e := envOn(t, core)
	ctx := t.Context()
	half := float32(0.5)
	item := func() *jobs.ItemRequest {
		return &jobs.ItemRequest{Input: batcher.Input{Op: batcher.OpEmbedding, Text: "x"}}
	}
	if _, err := e.m.Begin(ctx, jobs.Spec{Model: "embed", Params: batcher.Params{Temperature: &half}}); !errors.Is(err, jobs.ErrInvalid) ||
		!strings.Contains(err.Error(), "spec.params.temperature") || !strings.Contains(err.Error(), "take no generation parameters") {
		t.Errorf("spec.params: Begin = %v, want ErrInvalid naming spec.params.temperature", err)
	}
	for _, tt := range []struct {
		name string
		spec jobs.Spec
		edit func(r *jobs.ItemRequest)
		want string
	}{
		{"item", jobs.Spec{Model: "embed"}, func(r *jobs.ItemRequest) { r.Params.MaxTokens = 5 },
			`model "embed": request.params.max_tokens: route "embed" serves embeddings, which take no generation parameters`},
		{"run group temperature", jobs.Spec{Model: "embed", Groups: []jobs.Group{{Temperature: &half}}}, func(*jobs.ItemRequest) {},
			`spec.run_groups[0] on model "embed": request.params.temperature: route "embed" serves embeddings`},
		{"run group seeds", jobs.Spec{Model: "embed", Groups: []jobs.Group{{Runs: 2, Seeds: []int64{1, 2}}}}, func(*jobs.ItemRequest) {},
			`spec.run_groups[0] on model "embed": request.params.seed`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.FailOnInvalid = true
			c, err := e.m.Begin(ctx, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Abort()
			r := item()
			tt.edit(r)
			if err := c.Add(ctx, "a", r); !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Add = %v, want ErrInvalid saying %q", err, tt.want)
			}
		})
	}
}
