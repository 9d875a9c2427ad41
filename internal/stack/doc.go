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
// A held stack is not free, and not only for its worker: the runtime
// starts each new goroutine with the average stack in use at the last
// collection (Go 1.19's adaptive stack start), and Hold's frame counts as
// in use. With Size at 32 KiB (an 8 KiB frame) the 2,000 dispatch workers
// of bench's BenchmarkStream2000 raised that average past 4 KiB, so every
// goroutine started with 8 KiB: gRPC handlers, net/http's connection
// goroutines, and each idle worker held 32 KiB. At 16 KiB (a 4 KiB frame)
// the start stays at 4 KiB and the stacks per open stream beyond a direct
// one went from 15.0 KB to 8.3 KB (medians of 4 rounds), while a
// streamed chat's dispatch still fits the held stack: no worker stack is
// copied in BenchmarkStreamStart's CPU profile, as before.
//
// grpc-go's stream handlers are not held or grown ahead: a handler lives
// as long as its stream, so a larger stack there is memory every open
// stream keeps (BenchmarkStream2000's stack/stream-batcher rose by about
// 7 KB a stream when each was grown to 32 KiB), against a copy once per
// stream.
package stack
