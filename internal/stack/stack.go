package stack

// Size is about the stack Grow makes room for: a streamed chat's dispatch
// (the core's layers, net/http, the backend's stream reader) and its gRPC
// handler (interceptors, proto decoding, the core's admission) fit in it.
const Size = 32 << 10

// grown is never set: it keeps Grow's frame from being optimised away.
var grown bool

// Grow makes sure the calling goroutine has about Size bytes of stack.
// Its frame is that large, so its prologue grows a smaller stack at once;
// the frame is never written (its only use is on a path never taken), so
// where the stack is large enough already Grow costs a call.
//
//go:noinline
func Grow() {
	if grown {
		var pad [Size - 4<<10]byte
		keep(pad[:])
	}
}

//go:noinline
func keep([]byte) {}

// HoldSize is the frame Hold keeps under the function it runs.
const HoldSize = Size / 4

// Hold runs f, typically a worker's whole loop, below a frame of
// HoldSize bytes that is never written. The garbage collector halves a
// parked goroutine's stack only while it uses less than a quarter of it,
// so f's stack, once grown to Size by its work, stays so while f waits
// between jobs: f needs no Grow, and its jobs no stack copy.
//
//go:noinline
func Hold(f func()) {
	if grown {
		var pad [HoldSize]byte
		keep(pad[:])
	}
	f()
}
