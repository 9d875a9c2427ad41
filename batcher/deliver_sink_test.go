package batcher

import (
	"testing"
	"time"
)

// heldSink holds the EventDone of its request until release is closed.
type heldSink struct {
	entered, release chan struct{}
}

func (s *heldSink) OnEvent(ev *Event) {
	if ev.Kind == EventDone {
		close(s.entered)
		<-s.release
	}
}

// TestSlowSinkHoldsNoBatchMate: a batch's plain callers are woken whatever
// a batch-mate's sink does with its own completion. The run wakes its
// plain calls in one pass after their books (batchRun.signal); a call
// with a sink, ended in the same loop before that pass, held every plain
// caller of the batch for as long as its sink took.
func TestSlowSinkHoldsNoBatchMate(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3})
	sink := &heldSink{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(sink.release)
	before := submit(t, b, req("before", PriorityNormal))
	slow := req("slow", PriorityNormal)
	slow.Sink = sink
	sc := submit(t, b, slow)
	after := submit(t, b, req("after", PriorityNormal))
	<-sink.entered // the batch was answered; the sink holds its completion
	for _, c := range []*Call{before, after} {
		select {
		case <-c.Done():
			wantOK(t, c)
		case <-time.After(time.Minute): // a failure only: the wake needs no time
			t.Fatalf("%s not woken while its batch-mate's sink is held", c.req.ID)
		}
	}
	if isDone(sc) {
		// Done is signalled after the sink's event returns.
		t.Errorf("slow done before its sink returned")
	}
}
