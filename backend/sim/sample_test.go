package sim_test

import (
	"testing"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// Runs of one prompt at a temperature above 0 differ, unless they share a
// seed; at temperature 0 they agree.
func TestSamplingVariesRuns(t *testing.T) {
	ctx := t.Context()
	p := newProvider(t, sim.Config{})
	in := prompt("write a haiku about queues")
	texts := func(params batcher.Params) map[string]bool {
		seen := map[string]bool{}
		for range 5 {
			r, err := p.Call(ctx, "m", in, params)
			if err != nil {
				t.Fatal(err)
			}
			seen[r.Text] = true
		}
		return seen
	}
	if n := len(texts(batcher.Params{Temperature: ptr[float32](0.7)})); n < 4 {
		t.Errorf("5 runs at temperature 0.7 gave %d distinct texts, want them to differ", n)
	}
	if n := len(texts(batcher.Params{Temperature: ptr[float32](0)})); n != 1 {
		t.Errorf("5 runs at temperature 0 gave %d distinct texts, want 1", n)
	}
	if n := len(texts(batcher.Params{Temperature: ptr[float32](0.7), Seed: ptr[int64](3)})); n != 1 {
		t.Errorf("5 runs with one seed gave %d distinct texts, want 1", n)
	}
	a := texts(batcher.Params{Temperature: ptr[float32](0.7), Seed: ptr[int64](1)})
	b := texts(batcher.Params{Temperature: ptr[float32](0.7), Seed: ptr[int64](2)})
	for k := range a {
		if b[k] {
			t.Errorf("seeds 1 and 2 gave the same text %q", k)
		}
	}
}
