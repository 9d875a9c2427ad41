package stack

// Size is about the stack a streamed chat's dispatch needs (the core's
// layers, net/http, the backend's stream reader).
const Size = 32 << 10

// grown is never set: it keeps Hold's frame from being optimised away.
var grown bool

//go:noinline
func keep([]byte) {}

// HoldSize is the frame Hold keeps under the function it runs.
const HoldSize = Size / 4

// Hold runs f, typically a worker's whole loop, below a frame of
// HoldSize bytes that is never written. The garbage collector halves a
// parked goroutine's stack only while it uses less than a quarter of it,
// so f's stack, once grown to Size by its work, stays so while f waits
// between jobs: its jobs copy no stack.
//
//go:noinline
func Hold(f func()) {
	if grown {
		var pad [HoldSize]byte
		keep(pad[:])
	}
	f()
}
