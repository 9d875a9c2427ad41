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
	// its requests left it unset). When the backend does not share
	// max_tokens across a batch (ParamSharer), it is the route's default and
	// each request's Params.MaxTokens (0: this default) is its own.
	MaxTokens int32

	// RateLimit may be set by the backend when the upstream reported its
	// limits on a successful call (x-ratelimit-* headers): the dispatcher
	// keeps its budget within what the upstream says is left.
	RateLimit *RateLimitInfo

	stream   *streamState // a streamed request's buffer (the batch holds it alone)
	deadline time.Time    // the latest deadline among its requests
	verdict  func(error)  // the breaker's, told by the breakerVerdict layer
	run      *batchRun    // the run dispatching it: UpstreamCall reports there
}

// UpstreamCall reports one upstream call (one HTTP request) that the backend
// made for the batch: how long it took and its error (nil: it succeeded).
// A backend whose batch is not exactly one call (a fan-out makes one per
// request, packs one per pack) reports each call before Dispatch returns,
// from any goroutine, so that the metrics count calls as the provider sees
// them: batcher.upstream.calls and gen_ai.client.operation.duration by
// outcome, and batcher.upstream.calls_saved. A Dispatch that reports none
// counts as one call, with its own duration and error.
func (b *Batch) UpstreamCall(d time.Duration, err error) {
	if r := b.run; r != nil {
		r.upstreamCall(d, err)
	}
}

// Response is one request's answer from a Backend. Err set means that request
// failed while its batch-mates may have succeeded.
type Response struct {
	Text         string
	Embedding    []float32
	FinishReason FinishReason
	Usage        Usage
	// Chat holds a chat answer's parts beyond text (see Result); nil for
	// a plain text answer.
	Chat *ChatOutput
	Err  error
}

// empty reports whether r holds no answer.
func (r *Response) empty() bool {
	return r.Text == "" && r.Embedding == nil && (r.Chat == nil || r.Chat.ToolCalls == nil && r.Chat.Refusal == "" && r.Chat.Choices == nil)
}

// Backend sends batches to a provider.
//
// Contract:
//   - Every request of a batch shares its route, operation and generation
//     parameters (max_tokens resolved, temperature, top_p, stop, seed): the
//     lane key guarantees it, so a backend may send them as one native call.
//     A backend that implements ParamSharer gets only the parameters it
//     names shared; each request's Params hold its own.
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

// ParamSet is a set of generation parameters, one bit each.
type ParamSet uint8

// The generation parameters that may split lanes.
const (
	ParamMaxTokens ParamSet = 1 << iota
	ParamTemperature
	ParamTopP
	ParamSeed
	ParamStop
	// ParamRich is everything else that shapes an answer and that one
	// upstream call may carry once for a whole batch: tools, tool choice,
	// response format, the parameters beyond the five above, user and
	// extra body fields. A backend that never sends a request that sets
	// any of it together with others (it fans them out) need not share it.
	ParamRich

	// AllParams is every parameter: what a batch shares unless its backend
	// says otherwise.
	AllParams = ParamMaxTokens | ParamTemperature | ParamTopP | ParamSeed | ParamStop | ParamRich
)

// Has reports whether s holds every parameter of p.
func (s ParamSet) Has(p ParamSet) bool { return s&p == p }

// ParamSharer is implemented by backends whose upstream calls do not carry
// a whole batch's generation parameters once: a backend that sends each
// request of a chat batch in a call of its own (fan-out) needs none of them
// shared. SharedParams reports which parameters every request of one batch
// of route (its backend model, its operation) must have equal; requests
// that differ only in the others then share a lane and a batch, and the
// backend reads each request's own Params. It is asked once per route
// target when the Batcher is built, and must not change its answer after.
// A backend that does not implement it shares AllParams (embeddings share
// none, whatever it says).
type ParamSharer interface {
	SharedParams(route, model string, op Operation) ParamSet
}

// BackendFunc adapts a function to Backend.
type BackendFunc func(ctx context.Context, b *Batch, out []Response) error

// Dispatch calls f.
func (f BackendFunc) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	return f(ctx, b, out)
}
