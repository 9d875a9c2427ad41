// Package stack grows a goroutine's stack ahead of a deep call, and keeps
// a worker's grown stack from shrinking while it waits.
//
// A goroutine's stack starts small and doubles when a call needs more,
// each time copying the stack and adjusting every frame on it, and the
// garbage collector halves the stacks of idle goroutines again. A pooled
// worker that sits idle between calls (the core's dispatch workers,
// grpc-go's stream workers) thus grows its stack anew, deep inside the
// call, for most calls (golang/go#18138): a streamed chat's upstream call
// and its gRPC handler each copied their stack once or twice, about 16 µs
// of CPU a chat in bench's BenchmarkStreamStart. Grow makes the room in
// one step while the stack is still shallow, where the copy is cheap.
package stack
