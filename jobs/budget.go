package jobs

import (
	"context"
	"sync"
)

// tokenBudget is a route's provider budget of enqueued tokens
// (BatchRoute.MaxEnqueuedTokens): the tokens of the upstream batches it
// created that have not ended. Like RPM and TPM it is the provider's
// account's, so every job on the route shares it: a chunk takes its
// tokens before its batch is created and gives them back once the batch
// has ended and its results are recorded. A chunk larger than the whole
// budget goes alone, when nothing else is enqueued.
type tokenBudget struct {
	limit int64

	mu   sync.Mutex
	used int64
	// freed is closed and replaced whenever used drops (guarded by mu).
	freed chan struct{}
}

// acquire waits until n more tokens fit in the budget and takes them.
func (b *tokenBudget) acquire(ctx context.Context, n int64) error {
	if b == nil {
		return nil
	}
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take takes n tokens without waiting: a batch already upstream (found
// again after a restart) counts whatever the budget says.
func (b *tokenBudget) take(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// release gives n tokens back.
func (b *tokenBudget) release(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.used = max(b.used-n, 0)
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// budgets are the manager's token budgets by route, made on first use.
type budgets struct {
	mu sync.Mutex
	m  map[string]*tokenBudget
}

// of returns route's budget of limit tokens; nil (no bound) when limit is
// not positive. A limit changed by a reload applies from then on.
func (bs *budgets) of(route string, limit int64) *tokenBudget {
	if limit <= 0 {
		return nil
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.m == nil {
		bs.m = map[string]*tokenBudget{}
	}
	b := bs.m[route]
	if b == nil {
		b = &tokenBudget{freed: make(chan struct{})}
		bs.m[route] = b
	}
	b.mu.Lock()
	b.limit = limit
	b.mu.Unlock()
	return b
}

// chunkTokens estimates what a line of w bytes asking for up to maxTokens
// costs against the budget: the line's bytes at four a token, plus
// maxTokens, which is what providers count (OpenAI: the prompt's tokens and
// max_tokens).
func chunkTokens(w int, maxTokens int32) int64 {
	return int64(w)/4 + 1 + int64(maxTokens)
}
