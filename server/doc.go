// Package server is Batcher's gRPC service: a thin translation layer
// between the batcher.v1 wire messages and the core (package batcher).
//
// It translates proto Requests into batcher.Requests, the core's results
// and events into Completions and Events, and the core's errors into gRPC
// statuses in one function (toStatus, in errors.go). It holds no batching
// logic: admission, batching, deadlines and shutdown draining are the
// core's.
//
// Guarantees:
//   - bad input never panics: it gets INVALID_ARGUMENT naming the proto
//     field, for example "request.params.temperature: must be 0 to 2, got 3";
//   - no upstream status code, upstream body or internal error text crosses
//     the wire: upstream failures are translated by class and carry only
//     the backend's caller-safe message;
//   - on SubmitStream every accepted request gets exactly one Completion and
//     every refused message one Rejection; a full in-flight window stops the
//     server reading the stream (gRPC flow control pushes back) and never
//     fails a request; when the caller goes away, everything it had in
//     flight is cancelled in the core;
//   - streams are bounded: at most WithMaxStreams open, and a server-wide
//     budget of answers owed (WithMaxPendingMessages) past which streams
//     that owe answers are not read, so that callers who stop reading are
//     pushed back by flow control instead of growing the server's memory;
//   - a request whose bytes do not decode, or that carries a field its
//     message type does not declare, gets INVALID_ARGUMENT naming it
//     (codec.go, unknown.go): nothing a caller sent is dropped; on
//     SubmitStream a request with such a field is its own Rejection, and
//     the stream goes on;
//   - Shutdown drains in order (health NOT_SERVING and health watches
//     ended, core drain, streams send what they owe and end), so that
//     grpc.Server.GracefulStop can return; Drain and Deliver split it, so
//     that delivery gets a budget of its own after the drain deadline.
//
// Typical wiring:
//
//	core, _ := batcher.New(...)
//	srv, err := server.New(core, server.WithLogger(log))
//	gs := server.NewGRPCServer(tp)
//	srv.Register(gs)
//	go gs.Serve(lis)
//	...
//	srv.Shutdown(ctx)
//	gs.GracefulStop()
//
// Trace context: a Submit's request span is a child of its RPC's span
// (otelgrpc, from the caller's traceparent metadata). On SubmitStream, a
// request carrying traceparent/tracestate fields gets its span under that
// remote parent, otherwise under the stream's span.
package server
