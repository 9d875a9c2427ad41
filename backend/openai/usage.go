package openai

import (
	"math"
	"math/bits"

	"github.com/batcherhq/batcher/batcher"
)

// split divides total among len(weights) shares in proportion to weights,
// by largest remainder, so that the shares add up to total exactly. With no
// weight at all it splits evenly. total is clamped to [0, MaxInt32].
func split(total int64, weights []int) []int32 {
	out := make([]int32, len(weights))
	if len(weights) == 0 {
		return out
	}
	total = max(0, min(total, math.MaxInt32))
	var sum int64
	for _, w := range weights {
		sum += int64(max(w, 0))
	}
	w := func(i int) int64 {
		if sum == 0 {
			return 1
		}
		return int64(max(weights[i], 0))
	}
	denom := sum
	if denom == 0 {
		denom = int64(len(weights))
	}
	var given int64
	rem := make([]int64, len(weights))
	for i := range weights {
		// total×w(i)/denom ≤ total, so the quotient fits; the product may
		// not, hence 128-bit arithmetic.
		hi, lo := bits.Mul64(uint64(total), uint64(w(i)))
		q, r := bits.Div64(hi, lo, uint64(denom))
		out[i] = int32(q)
		rem[i] = int64(r)
		given += int64(out[i])
	}
	// Hand the leftover units to the largest remainders, earliest first.
	for left := total - given; left > 0; left-- {
		best := -1
		for i := range rem {
			if rem[i] >= 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	return out
}

// usageOf converts a wire usage, which may be absent.
func usageOf(u *wireUsage) (prompt, completion int64) {
	if u == nil {
		return 0, 0
	}
	return u.PromptTokens, u.CompletionTokens
}

// clampUsage converts one request's own usage.
func clampUsage(prompt, completion int64) batcher.Usage {
	c := func(n int64) int32 { return int32(max(0, min(n, math.MaxInt32))) }
	return batcher.Usage{PromptTokens: c(prompt), CompletionTokens: c(completion)}
}
