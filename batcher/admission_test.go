package batcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdmissionKeepsRoomForUrgent: background work cannot fill the share
// of the queue held for URGENT and HIGH; once the whole queue is full, an
// URGENT request evicts the newest queued DEFERRABLE, else LOW, request,
// which ends with ErrEvicted (an ErrQueueFull), never silently.
func TestAdmissionKeepsRoomForUrgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 100, MinBatchSize: 100, Window: time.Hour, MaxWait: time.Hour},
			WithQueueCapacity(10), WithQueueReserve(0.2))
		var low []*Call
		for i := range 7 {
			low = append(low, submit(t, b, req(fmt.Sprint("low", i), PriorityLow)))
		}
		deferrable := submit(t, b, req("def", PriorityDeferrable))
		if _, err := b.Submit(context.Background(), req("normal", PriorityNormal)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("NORMAL into the reserved share: %v, want ErrQueueFull", err)
		}
		// URGENT and HIGH work in a lane of its own, so that its batches do
		// not carry the background requests away.
		high := submit(t, b, inLane("high", PriorityHigh, 1))
		u1 := submit(t, b, inLane("u1", PriorityUrgent, 1)) // the queue is full now
		u2 := submit(t, b, inLane("u2", PriorityUrgent, 1)) // evicts the DEFERRABLE
		synctest.Wait()
		if !isDone(deferrable) || !errors.Is(deferrable.Result().Err, ErrEvicted) || !errors.Is(deferrable.Result().Err, ErrQueueFull) {
			t.Fatalf("the DEFERRABLE request: done %v, %v; want ErrEvicted", isDone(deferrable), deferrable.Result().Err)
		}
		u3 := submit(t, b, inLane("u3", PriorityUrgent, 1)) // evicts the newest LOW
		synctest.Wait()
		if r := low[6].Result(); !errors.Is(r.Err, ErrEvicted) {
			t.Fatalf("the newest LOW request: %v, want ErrEvicted", r.Err)
		}
		for _, c := range low[:6] {
			if isDone(c) {
				t.Fatalf("%s ended: only the newest LOW request should have been evicted", c.req.ID)
			}
		}
		if _, err := b.Submit(context.Background(), inLane("h2", PriorityHigh, 1)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("HIGH into a full queue: %v, want ErrQueueFull (only URGENT evicts)", err)
		}
		close(be.hold)
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, c := range append(low[:6], high, u1, u2, u3) {
			<-c.Done()
			wantOK(t, c)
		}
	})
}

func TestQueueReserveValidated(t *testing.T) {
	for _, share := range []float64{-0.1, 0.95} {
		_, err := New(WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}}), WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be"}), WithQueueReserve(share))
		if err == nil {
			t.Errorf("queue reserve %v: New succeeded", share)
		}
	}
}

// TestLaneCap: past the lane cap, a request that needs a new lane fails
// with ErrTooManyLanes naming the limit; requests for open lanes still go.
func TestLaneCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour}, WithMaxLanes(2))
		a := submit(t, b, inLane("a", PriorityNormal, 0))
		c := submit(t, b, inLane("b", PriorityNormal, 1))
		_, err := b.Submit(context.Background(), inLane("c", PriorityNormal, 2))
		if !errors.Is(err, ErrTooManyLanes) || !strings.Contains(err.Error(), "2 lanes open, the limit") {
			t.Fatalf("a third lane: %v, want ErrTooManyLanes naming the limit of 2", err)
		}
		d := submit(t, b, inLane("d", PriorityNormal, 0)) // an open lane
		if n := b.Pending(); n != 3 {
			t.Fatalf("%d pending, want 3: the refused request must not count", n)
		}
		close(be.hold)
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, x := range []*Call{a, c, d} {
			<-x.Done()
			wantOK(t, x)
		}
	})
}

// Ended background calls are not held for eviction beyond about as many as
// are live, whatever the queue's capacity: with a capacity of 100,000 the
// list once held up to 200,000 ended calls, their requests and results.
func TestEvictionListHoldsFewEndedCalls(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 4, BatchConfig{MaxBatchSize: 8, MinBatchSize: 1}, WithQueueCapacity(100_000))
	for i := range 5_000 {
		wantOKDo(t, b, req(fmt.Sprint("low-", i), PriorityLow))
	}
	b.admit.mu.Lock()
	held := len(b.admit.evictable[evictClass(PriorityLow)])
	b.admit.mu.Unlock()
	if held > 2*minPruneAt {
		t.Fatalf("the eviction list holds %d calls after 5,000 ended one by one, want at most %d", held, 2*minPruneAt)
	}
}
