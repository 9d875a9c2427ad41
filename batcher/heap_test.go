package batcher

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestDeadlineHeap pushes calls with random deadlines, takes random sets
// out through both of removeAll's ways and single removes, and checks after
// each step that the heap is ordered, every index is right and the calls
// left are exactly those not taken out.
func TestDeadlineHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := mono(time.Now().UnixNano())
	for round := range 200 {
		var h deadlineHeap
		in := map[*Call]bool{}
		n := 1 + rng.IntN(600)
		for range n {
			c := &Call{deadline: base + mono(time.Duration(rng.IntN(1000))*time.Millisecond)}
			h.push(c)
			in[c] = true
		}
		check := func(step string) {
			t.Helper()
			if len(h) != len(in) {
				t.Fatalf("round %d, %s: %d calls in the heap, want %d", round, step, len(h), len(in))
			}
			for i, c := range h {
				if c.heapIdx != i {
					t.Fatalf("round %d, %s: call at %d has heapIdx %d", round, step, i, c.heapIdx)
				}
				if !in[c] {
					t.Fatalf("round %d, %s: a removed call is still in the heap", round, step)
				}
				if p := (i - 1) / 2; i > 0 && h.less(i, p) {
					t.Fatalf("round %d, %s: call at %d is before its parent", round, step, i)
				}
			}
		}
		check("push")
		for len(h) > 0 {
			switch k := 1 + rng.IntN(len(h)); rng.IntN(3) {
			case 0: // one at a time
				c := h[rng.IntN(len(h))]
				h.remove(c.heapIdx)
				delete(in, c)
			default: // a set, small or large
				picked := map[*Call]bool{}
				var out []*Call
				for len(out) < k {
					if c := h[rng.IntN(len(h))]; !picked[c] {
						picked[c] = true
						out = append(out, c)
					}
				}
				h.removeAll(out)
				for _, c := range out {
					delete(in, c)
				}
			}
			check("remove")
		}
	}
}
