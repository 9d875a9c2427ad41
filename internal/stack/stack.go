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
