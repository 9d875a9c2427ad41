// Package stack keeps a worker's grown stack from shrinking while it
// waits.
//
// A goroutine's stack starts small and doubles when a call needs more,
// each time copying the stack and adjusting every frame on it, and the
// garbage collector halves the stacks of idle goroutines again. A pooled
// worker that sits idle between calls (the core's dispatch workers) thus
// grows its stack anew, deep inside the call, for most calls
// (golang/go#18138): a streamed chat's upstream call copied its stack
// once or twice, about 8 µs of CPU a chat in bench's
// BenchmarkStreamStart. Hold keeps the stack a worker's calls grew.
//
// grpc-go's stream handlers are not held or grown ahead: a handler lives
// as long as its stream, so a larger stack there is memory every open
// stream keeps (BenchmarkStream2000's stack/stream-batcher rose by about
// 7 KB a stream when each was grown to 32 KiB), against a copy once per
// stream.
package stack
