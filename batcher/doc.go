// Package batcher is Batcher's accumulator-dispatcher core.
//
// Callers submit Requests. Each request joins the lane of its route and
// batch-relevant parameters; one goroutine owns each lane and cuts a batch
// when the first trigger holds: the batch is full, its token budget is
// reached, its oldest request's priority delay has passed, it holds
// MinBatchSize requests while the backend has idle capacity, or the caller
// flushes or shuts down. Batches go to their route's Backend within the
// backend's concurrency limit, highest priority first.
//
// Guarantees:
//   - every admitted request ends with exactly one terminal Result, delivered
//     through its Call and, when the request has a Sink, as an EventDone;
//   - a request's deadline and cancellation fire on time, whether it is
//     queued or its batch is in flight; they never touch its batch-mates;
//   - admission never blocks: a full queue answers ErrQueueFull at once;
//   - Shutdown closes admission first, sends every partial batch at once and
//     ends whatever is still pending at its deadline with ErrShutdown.
//
// The package knows no wire format: it imports neither gRPC nor generated
// code. See DESIGN.md for who owns which state.
package batcher
