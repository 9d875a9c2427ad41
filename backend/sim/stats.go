package sim

import "sync/atomic"

// Stats counts what a provider has seen. A call is one upstream request: a
// native batch, one fan-out sub-call, or one Call.
type Stats struct {
	Calls     int64 // calls received, including rejected ones
	Items     int64 // inputs in the calls received
	Succeeded int64 // calls answered (some inputs may have failed alone)
	// RateLimited counts calls answered 429: over MaxConcurrency, RPM or TPM.
	RateLimited int64
	// Failures counts calls failed as a whole by injection (503).
	Failures int64
	// ItemFailures counts inputs failed alone: by injection (500) or for an
	// input of the wrong operation (400).
	ItemFailures int64
	// Invalid counts calls refused as invalid: beyond MaxBatchSize, or larger
	// than the token bucket.
	Invalid int64
	// Canceled counts calls whose context ended before they completed.
	Canceled int64
	// MaxConcurrent is the most calls ever in flight together, counting only
	// calls admitted under MaxConcurrency.
	MaxConcurrent    int64
	InFlight         int64 // calls in flight now
	PromptTokens     int64 // prompt tokens of answered inputs
	CompletionTokens int64 // generated tokens of answered inputs
}

type counters struct {
	calls, items, succeeded, rateLimited, failures, itemFailures, invalid, canceled atomic.Int64
	maxConcurrent, promptTokens, completionTokens                                   atomic.Int64
}

func (c *counters) observeConcurrency(n int64) {
	for {
		m := c.maxConcurrent.Load()
		if n <= m || c.maxConcurrent.CompareAndSwap(m, n) {
			return
		}
	}
}

// Stats returns a snapshot of the provider's counters. Each counter is read
// atomically; the snapshot as a whole is not.
func (p *Provider) Stats() Stats {
	c := &p.stats
	return Stats{
		Calls:            c.calls.Load(),
		Items:            c.items.Load(),
		Succeeded:        c.succeeded.Load(),
		RateLimited:      c.rateLimited.Load(),
		Failures:         c.failures.Load(),
		ItemFailures:     c.itemFailures.Load(),
		Invalid:          c.invalid.Load(),
		Canceled:         c.canceled.Load(),
		MaxConcurrent:    c.maxConcurrent.Load(),
		InFlight:         p.inFlight.Load(),
		PromptTokens:     c.promptTokens.Load(),
		CompletionTokens: c.completionTokens.Load(),
	}
}
