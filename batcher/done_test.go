package batcher

import (
	"strconv"
	"sync"
	"testing"
)

// TestDoneMadeOnDemandConcurrentSafe races the first Done calls of a
// Submit call (several goroutines at once) against its end: the channel
// is made only when asked for, so every order must give each caller a
// channel that closes on the result, the same one for all callers that
// asked before the end.
func TestDoneMadeOnDemandConcurrentSafe(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 4, BatchConfig{MaxBatchSize: 8, MinBatchSize: 1})
	const n, askers = 300, 3
	var wg sync.WaitGroup
	for i := range n {
		r := req(strconv.Itoa(i), PriorityNormal)
		c := submit(t, b, r)
		chans := make([]<-chan struct{}, askers)
		for a := range askers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				chans[a] = c.Done()
				<-chans[a]
			}()
		}
		wg.Wait()
		if res := c.Result(); res.Err != nil || res.Text != "re:"+r.Input.Prompt {
			t.Fatalf("call %d: %q, %v", i, res.Text, res.Err)
		}
		for a := range askers {
			if chans[a] != c.Done() && c.Done() != closedDone {
				t.Fatalf("call %d: asker %d got another channel than Done's", i, a)
			}
		}
	}
}

// doneSink signals its request's EventDone.
type doneSink chan struct{}

func (s doneSink) OnEvent(ev *Event) {
	if ev.Kind == EventDone {
		close(s)
	}
}

// TestDoneAfterEnd: a call that ended before anyone asked for its done
// channel (a stream's, reporting through its sink) made none, and Done
// then returns a closed channel.
func TestDoneAfterEnd(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 1})
	sink := make(doneSink)
	r := req("s", PriorityNormal)
	r.Sink = sink
	c := submit(t, b, r)
	<-sink
	// finishAs holds evMu (the call has a sink) from before EventDone
	// until after it signalled done.
	c.evMu.Lock()
	c.evMu.Unlock() //nolint:staticcheck // an empty critical section: waits for finishAs
	if c.done != nil {
		t.Fatal("a done channel was made although nobody asked for one")
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of an ended call is not closed")
	}
	if res := c.Result(); res.Err != nil || res.Text != "re:"+r.Input.Prompt {
		t.Fatalf("result %q, %v", res.Text, res.Err)
	}
}
