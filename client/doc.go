// Package client is the Go client of Batcher's gRPC service
// (batcher.v1.BatcherService).
//
// A Client wraps a gRPC connection: New takes one you own, Dial makes one
// that propagates the caller's W3C trace context. Submit sends one request
// and waits for its completion. Stream opens a SubmitStream and multiplexes
// many requests over it: each Send returns a Handle whose Wait yields that
// request's completion, and progress events and summaries go to callbacks
// (OnEvent, OnSummary) or a channel (WithEvents). Chat, Complete and Embed
// build requests; RequestOptions set their fields.
//
// Submit retries what the service says to retry: a RESOURCE_EXHAUSTED or
// UNAVAILABLE status that carries a google.rpc.RetryInfo is retried after
// the delay it gives, within the caller's deadline, up to WithMaxAttempts
// times in all (WithoutRetry turns this off). Streams do not retry: a
// rejected request's handle returns the status, RetryInfo included.
//
// Errors are gRPC status errors, as the service sends them: use status.Code
// or status.Convert. A completion that carries an error is returned with
// that error; a rejected request has no completion.
//
// Guarantees of a Stream:
//   - every Handle resolves exactly once: with its completion, its
//     rejection, or, if the stream ends first (the service fails it, its
//     context ends, Close gives up), an error wrapping ErrStreamBroken and
//     the stream's status; no handle can hang;
//   - Close half-closes and drains: when it returns, every handle is
//     resolved and the RPC is over;
//   - Send is safe for concurrent use; it blocks while gRPC flow control
//     holds the stream (the service stops reading when the stream's
//     in-flight window is full) and honours its context;
//   - a request's progress events are delivered in order, all before its
//     handle resolves;
//   - memory is bounded by what is in flight: a handle is forgotten once
//     resolved.
//
// One goroutine per stream reads the service's messages and routes them by
// request id; it runs the callbacks, so they must return promptly.
package client
