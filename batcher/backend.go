package batcher

import (
	"context"
	"time"
)

// Batch is what a Backend sends upstream in one dispatch.
type Batch struct {
	ID       string
	Route    string // the route callers named
	Model    string // the backend's model name for the route
	Op       Operation
	Requests []*Request
	// MaxTokens is the batch's resolved max_tokens (the route's default when
	// its requests left it unset).
	MaxTokens int32

	// RateLimit may be set by the backend when the upstream reported its
	// limits on a successful call (x-ratelimit-* headers): the dispatcher
	// keeps its budget within what the upstream says is left.
	RateLimit *RateLimitInfo

	deadline time.Time   // the latest deadline among its requests
	verdict  func(error) // the breaker's, told by the breakerVerdict layer
}

// Response is one request's answer from a Backend. Err set means that request
// failed while its batch-mates may have succeeded.
type Response struct {
	Text         string
	Embedding    []float32
	FinishReason FinishReason
	Usage        Usage
	Err          error
}

// Backend sends batches to a provider.
//
// Contract:
//   - Every request of a batch shares its route, operation and generation
//     parameters (max_tokens resolved, temperature, top_p, stop, seed): the
//     lane key guarantees it, so a backend may send them as one native call.
//   - Dispatch writes exactly one Response per request: out[i] answers
//     b.Requests[i], and len(out) == len(b.Requests). A failed request has
//     out[i].Err set; the others may still succeed (a partial failure).
//   - A non-nil return fails every request of the batch whose out[i] is
//     still zero; wrap an *UpstreamError to say how it failed.
//   - Dispatch honours ctx: it returns promptly once ctx is done.
//   - It must not retain b, its requests or out after it returns.
//   - Dispatch is called concurrently, up to the backend's concurrency limit.
type Backend interface {
	Dispatch(ctx context.Context, b *Batch, out []Response) error
}

// BackendFunc adapts a function to Backend.
type BackendFunc func(ctx context.Context, b *Batch, out []Response) error

// Dispatch calls f.
func (f BackendFunc) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	return f(ctx, b, out)
}
