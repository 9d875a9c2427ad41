package batcher

import "time"

// EventKind is the kind of a progress event.
type EventKind uint8

// The event kinds, in the order a request meets them. Batched, Dispatched
// and Retrying may repeat when a request is retried.
const (
	EventQueued EventKind = iota + 1
	EventBatched
	EventDispatched
	EventRetrying
	EventDone
)

func (k EventKind) String() string {
	switch k {
	case EventQueued:
		return "queued"
	case EventBatched:
		return "batched"
	case EventDispatched:
		return "dispatched"
	case EventRetrying:
		return "retrying"
	case EventDone:
		return "done"
	}
	return "event(?)"
}

// Event is one progress event of one request. Only the fields of its Kind
// are set.
type Event struct {
	Kind    EventKind
	Time    time.Time
	Request *Request

	Lane string // EventQueued

	BatchID   string // EventBatched, EventDispatched; the caller's view, as Result.BatchID
	BatchSize int    // EventBatched; the caller's view, as Result.BatchSize
	Attempt   int    // EventDispatched, EventRetrying (the attempt that failed)
	Backend   string // EventDispatched

	Delay time.Duration // EventRetrying
	Class ErrorClass    // EventRetrying
	Err   error         // EventRetrying

	Result *Result // EventDone
	// Released is set on an EventDone after which the core reads the
	// event's Request no more: the request ended with its own batch's
	// answer, and nothing else in the core (a lane, an eviction list, a
	// dedup group, a timer, a shutdown) still holds it. The sink may then
	// reuse the Request's memory once OnEvent returns (Call.Request then
	// returns what the sink made of it). Without it the core may still
	// read the Request after OnEvent returns (a request cancelled while
	// its batch is upstream is read by that batch until it returns), so
	// the Request must be left to the garbage collector.
	Released bool // EventDone
}

// EventSink receives progress events.
//
// OnEvent is called from the batcher's own goroutines, possibly concurrently
// for different requests but in order for any one request. It must not block
// and must not call back into the Batcher; copy what it needs, since the
// Event and its Result are not valid after it returns.
type EventSink interface {
	OnEvent(ev *Event)
}

// ProgressFilter is an optional interface of an EventSink. A sink whose
// WantsProgress reports false gets each request's EventDone alone: the
// core does not build the progress events (queued, batched, dispatched,
// retrying) that it would drop. The core asks once per request, when it
// admits it.
type ProgressFilter interface {
	WantsProgress() bool
}

// wantsProgress reports whether sink is sent progress events.
func wantsProgress(sink EventSink) bool {
	f, ok := sink.(ProgressFilter)
	return !ok || f.WantsProgress()
}

// ResultHolder is an optional interface of an EventSink: the core keeps
// the request's terminal result in the Result that ResultSlot returns
// instead of one it allocates, and its EventDone's Result is that slot.
// The core asks once, when it admits the request, and writes the slot
// once, as the request ends; Call.Result reads it. A sink that pools its
// requests with their slots (Event.Released) spares the core an
// allocation a request.
type ResultHolder interface {
	ResultSlot() *Result
}

// CallHolder is an optional interface of an EventSink that pools its
// requests (Event.Released) and wants to pool their Calls with them. The
// core builds the request's Call in the one CallSlot returns (a zero
// Call, or one whose CallReleased came), instead of allocating one; it
// asks once, when Submit admits the request. After an EventDone that
// released the request, and only then, the core calls CallReleased once
// it touches the Call no more: the slot may then be reused, once Submit
// has returned and the holder's own uses of the Call (Cancel, FlushCalls,
// whose flush a lane handles later, Done) are over. Without a release it
// never calls it, and the Call must be left to the garbage collector.
type CallHolder interface {
	CallSlot() *Call
	CallReleased()
}
