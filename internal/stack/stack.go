package stack

// Size is the stack a held worker keeps: room for a streamed chat's
// dispatch (the core's layers, net/http, the backend's stream reader:
// about 7 KB while it waits on the upstream, a few more while it sends the
// request) above Hold's frame. It was 32 KiB: see the package doc for why
// a larger one costs every goroutine of the process.
const Size = 16 << 10

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
