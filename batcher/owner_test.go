package batcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// lanesOf submits one request per lane: distinct max_tokens make distinct
// lanes.
func inLane(id string, p Priority, lane int32) *Request {
	r := req(id, p)
	r.Params.MaxTokens = 10 + lane
	return r
}

// TestProtectedSlotNotInvertedByAgedBackground: an aged background waiter
// that outranks a fresh URGENT request must not keep it from the protected
// slot that is free (issue: URGENT waited for an in-flight batch to end).
func TestProtectedSlotNotInvertedByAgedBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 5, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
			withBackend("be", func(c *BackendConfig) { c.StrictProtectedShare = true }))
		for i := range 4 { // the four unprotected slots of five
			submit(t, b, inLane(fmt.Sprint("l", i), PriorityLow, 0))
		}
		synctest.Wait()
		aged := submit(t, b, inLane("aged", PriorityLow, 0))
		time.Sleep(5 * time.Second) // five aging steps: it outranks a fresh URGENT
		u := submit(t, b, inLane("u", PriorityUrgent, 1))
		synctest.Wait()
		if n := be.calls.Load(); n != 5 {
			t.Fatalf("%d dispatches, want 5: URGENT was not dispatched although the protected slot was free", n)
		}
		if got := be.batchIDs()[4]; got[0] != "u" {
			t.Fatalf("fifth dispatch %v, want u", got)
		}
		if isDone(aged) {
			t.Fatal("the aged LOW request took the protected slot")
		}
		close(be.hold)
		<-u.Done()
		<-aged.Done()
	})
}

// TestBorrowedSlotGoesToUrgentFirst: while no URGENT or HIGH work waits,
// background work borrows the protected slot; once URGENT waits, the next
// slot that frees is its, before an aged background waiter's.
func TestBorrowedSlotGoesToUrgentFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 5, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		for i := range 5 {
			submit(t, b, inLane(fmt.Sprint("l", i), PriorityLow, 0))
		}
		synctest.Wait()
		if n := be.calls.Load(); n != 5 {
			t.Fatalf("%d dispatches, want 5: background work did not borrow the idle protected slot", n)
		}
		if st := b.Stats()[0]; st.Borrowed != 1 {
			t.Fatalf("%d slots borrowed, want 1", st.Borrowed)
		}
		aged := submit(t, b, inLane("aged", PriorityLow, 0))
		time.Sleep(5 * time.Second)
		u := submit(t, b, inLane("u", PriorityUrgent, 1))
		synctest.Wait()
		be.hold <- struct{}{} // one slot frees
		synctest.Wait()
		ids := be.batchIDs()
		if len(ids) != 6 || ids[5][0] != "u" {
			t.Fatalf("dispatches %v, want u sixth: the freed slot went to background work while URGENT waited", ids)
		}
		close(be.hold)
		<-u.Done()
		<-aged.Done()
	})
}

// TestReclaimAndGrantConcurrentSafe races lanes being reclaimed against
// grants arriving for them: no permit may be stranded (the backend's slots
// all come back) and every call ends.
func TestReclaimAndGrantConcurrentSafe(t *testing.T) {
	be := &fakeBackend{}
	b := newTest(t, be, 2, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithIdleLaneTimeout(time.Microsecond))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c, err := b.Submit(context.Background(), inLane(fmt.Sprint(g, "-", i), Priority(i%numPriorities), int32(i%7)))
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					c.Cancel()
				}
				<-c.Done()
			}
		})
	}
	wg.Wait()
	// Every call has ended; Shutdown returns once the workers have, and
	// each releases its permit before it delivers.
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := b.Stats()[0].InFlight; n != 0 {
		t.Fatalf("%d permits still out after every call ended: stranded", n)
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("%d calls pending", n)
	}
}

// TestFlushWaitsUntilSent: Flush returns once what it flushed has left,
// or with the context's error while no slot frees.
func TestFlushWaitsUntilSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour})
		a, c := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityNormal))
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if l := b.Lanes()[0]; l.InFlight != 2 || l.Queued["normal"] != 0 {
			t.Fatalf("Flush returned with lane %+v, want both requests in flight", l)
		}
		d := submit(t, b, req("d", PriorityNormal))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Flush(ctx); !errors.Is(err, ErrDeadline) {
			t.Fatalf("Flush with the only slot held: %v, want ErrDeadline", err)
		}
		close(be.hold)
		for _, x := range []*Call{a, c, d} {
			<-x.Done()
			wantOK(t, x)
		}
	})
}

// TestFlushCallsOnlyThose: FlushCalls sends the given calls, in a batch of
// their own, and leaves the rest of the lane to its triggers.
func TestFlushCallsOnlyThose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour})
		mine := []*Call{submit(t, b, req("m1", PriorityNormal)), submit(t, b, req("m2", PriorityLow))}
		other := submit(t, b, req("o", PriorityNormal))
		if err := b.FlushCalls(context.Background(), mine...); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := be.batchIDs(); len(got) != 1 || len(got[0]) != 2 || got[0][0] != "m1" || got[0][1] != "m2" {
			t.Fatalf("batches %v, want [[m1 m2]]", got)
		}
		if isDone(other) {
			t.Fatal("FlushCalls sent another caller's request")
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-other.Done()
		wantOK(t, other)
	})
}

// inTwoLanes submits a request for each id, their temperatures
// alternating between two values, which puts them in two lanes.
func inTwoLanes(t *testing.T, b *Batcher, ids ...string) []*Call {
	t.Helper()
	hot, cold := float32(0.9), float32(0)
	var calls []*Call
	for i, id := range ids {
		r := req(id, PriorityNormal)
		r.Params.Temperature = &hot
		if i%2 == 1 {
			r.Params.Temperature = &cold
		}
		calls = append(calls, submit(t, b, r))
	}
	return calls
}

// TestFlushCallsAcrossLanes: FlushCalls given calls of two lanes, mixed,
// sends each lane's in a batch of its own and waits for both.
func TestFlushCallsAcrossLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour})
		mine := inTwoLanes(t, b, "h1", "c1", "h2", "c2")
		other := submit(t, b, req("o", PriorityNormal)) // a third lane: no temperature
		if err := b.FlushCalls(context.Background(), append(mine, nil)...); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := be.batchIDs()
		slices.SortFunc(got, func(a, b []string) int { return slices.Compare(a, b) })
		want := [][]string{{"c1", "c2"}, {"h1", "h2"}}
		if len(got) != 2 || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if isDone(other) {
			t.Fatal("FlushCalls sent another caller's request")
		}
		for _, c := range mine {
			wantOK(t, c)
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-other.Done()
		wantOK(t, other)
	})
}

// TestFlushCallsThen: FlushCallsThen returns at once, runs then once,
// after every lane of the calls handled the flush (so the calls have
// left for their batches), and at once when none of them is queued.
func TestFlushCallsThen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour})
		mine := inTwoLanes(t, b, "h1", "c1")
		var ran atomic.Int32
		b.FlushCallsThen(func() { ran.Add(1) }, mine...)
		synctest.Wait()
		if n := ran.Load(); n != 1 {
			t.Fatalf("then ran %d times, want once", n)
		}
		for _, c := range mine {
			wantOK(t, c)
		}
		b.FlushCallsThen(func() { ran.Add(1) }, mine...) // ended: none queued
		if n := ran.Load(); n != 2 {
			t.Fatalf("then ran %d times in all, want a second time before FlushCallsThen returned", n)
		}
	})
}

// TestFlushThenAsTheLaneCloses: an unwaited flush's then runs whatever
// the lane does meanwhile: sent to an idle lane, which still closes
// after handling it; and sent to a lane that has closed, at once. (A lane
// closes only with an empty inbox, under the lock senders take: see
// FlushCallsThen.)
func TestFlushThenAsTheLaneCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour},
			WithIdleLaneTimeout(time.Second))
		c := submit(t, b, req("a", PriorityNormal))
		synctest.Wait()
		l := c.lane.Load()
		c.Cancel()
		<-c.Done()
		synctest.Wait() // the lane is idle, its close a second away
		var ran atomic.Int32
		then := func() { ran.Add(1) }
		fw := newFlushWait(noWait, nil)
		fw.then = then
		l.flush(fw)
		synctest.Wait()
		if n := ran.Load(); n != 1 {
			t.Fatalf("then ran %d times for a flush sent to an idle lane, want once", n)
		}
		time.Sleep(2 * time.Second) // past the idle timeout, on synctest's clock
		synctest.Wait()
		l.inMu.Lock()
		closed := l.closed
		l.inMu.Unlock()
		if !closed {
			t.Fatal("the idle lane did not close after the flush")
		}
		fw = newFlushWait(noWait, nil)
		fw.then = then
		l.flush(fw)
		if n := ran.Load(); n != 2 {
			t.Fatalf("then ran %d times in all, want a second time before flush returned on a closed lane", n)
		}
	})
}

// TestDeadlineOnTimeWhileOwnerSleeps: a call whose deadline comes before
// the lane owner's next timer still ends at its deadline (the push wakes
// the owner).
func TestDeadlineOnTimeWhileOwnerSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Second, MaxWait: time.Hour})
		low := submit(t, b, req("low", PriorityLow)) // due in 10 s: the owner sleeps till then
		synctest.Wait()
		r := req("short", PriorityDeferrable) // due in an hour, deadline in 1 s
		r.Timeout = time.Second
		start := time.Now()
		c := submit(t, b, r)
		<-c.Done()
		if d := time.Since(start); d != time.Second || !errors.Is(c.Result().Err, ErrDeadline) {
			t.Fatalf("ended after %v with %v, want ErrDeadline after exactly 1s", d, c.Result().Err)
		}
		<-low.Done()
	})
}

// TestPushCountedAheadStillFillsBatch: a producer counted in the lane's
// size but not yet in its inbox (paused between the count and the lock)
// must not keep the batch it completes waiting for the window. Here the
// push counted second appends first and wakes the owner, which finds two
// calls of three and sleeps; the paused push then completes the batch,
// and must wake the owner although the size its own count returned was
// two.
func TestPushCountedAheadStillFillsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Hour, MaxWait: time.Hour})
		first := submit(t, b, req("1", PriorityNormal))
		synctest.Wait() // the owner sleeps with one call, until the window
		paused, release := make(chan struct{}), make(chan struct{})
		var pauses atomic.Int32
		b.testHookPushCounted = func() {
			if pauses.Add(1) == 1 { // the first push only
				close(paused)
				<-release
			}
		}
		slow := make(chan *Call)
		go func() { slow <- submit(t, b, req("2", PriorityNormal)) }()
		<-paused // counted: the lane's size is 2, its inbox empty
		// Counted 3: it appends and wakes the owner, which finds 2 calls.
		fast := submit(t, b, req("3", PriorityNormal))
		synctest.Wait()
		if n := be.calls.Load(); n != 0 {
			t.Fatalf("sent %d batches with two calls of three in the lane", n)
		}
		close(release)
		c := <-slow
		synctest.Wait() // no time passes: only a nudge sends the batch now
		if got := be.sizes(); !slices.Equal(got, []int{3}) {
			t.Fatalf("batches %v with three calls queued, want [3] at once, not after the window", got)
		}
		for _, c := range []*Call{first, c, fast} {
			wantOK(t, c)
		}
	})
}
