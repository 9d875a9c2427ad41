package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func TestTriggerSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Hour})
		c1, c2 := submit(t, b, req("1", PriorityNormal)), submit(t, b, req("2", PriorityNormal))
		synctest.Wait()
		if n := be.calls.Load(); n != 0 {
			t.Fatalf("sent %d batches below max size", n)
		}
		c3 := submit(t, b, req("3", PriorityNormal))
		synctest.Wait()
		if got := be.sizes(); !slices.Equal(got, []int{3}) {
			t.Fatalf("batches %v, want [3]", got)
		}
		for _, c := range []*Call{c1, c2, c3} {
			wantOK(t, c)
		}
	})
}

func TestTriggerSizeWhileBackendBusy(t *testing.T) {
	// With the one slot busy, min-batch-when-idle cannot fire: the lane
	// waits for its window, unless the batch fills first.
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 1, Window: time.Hour})
		first := submit(t, b, req("first", PriorityNormal))
		synctest.Wait()
		var cs []*Call
		for i := range 3 {
			cs = append(cs, submit(t, b, req(fmt.Sprint(i), PriorityNormal)))
		}
		synctest.Wait()
		if got := be.sizes(); !slices.Equal(got, []int{1}) {
			t.Fatalf("batches %v while busy, want [1]", got)
		}
		be.hold <- struct{}{}
		synctest.Wait()
		wantOK(t, first)
		if got := be.sizes(); !slices.Equal(got, []int{1, 3}) {
			t.Fatalf("batches %v, want [1 3]", got)
		}
		close(be.hold)
		synctest.Wait()
		for _, c := range cs {
			wantOK(t, c)
		}
	})
}

func TestTriggerTokenBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, MaxBatchTokens: 100, Window: time.Hour})
		// Each request costs 40/4+1 = 11 prompt tokens plus 39 max_tokens = 50.
		mk := func(id string) *Request {
			r := req(id, PriorityNormal)
			r.Input.Prompt = fmt.Sprintf("%-40s", id)
			r.Params.MaxTokens = 39
			return r
		}
		submit(t, b, mk("a"))
		synctest.Wait()
		if n := be.calls.Load(); n != 0 {
			t.Fatalf("sent %d batches below the token budget", n)
		}
		submit(t, b, mk("b"))
		submit(t, b, mk("c"))
		synctest.Wait()
		if got := be.batchIDs(); len(got) != 1 || !slices.Equal(got[0], []string{"a", "b"}) {
			t.Fatalf("batches %v, want [[a b]]: the budget caps the batch at 100 tokens", got)
		}
	})
}

func TestTriggerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{Window: 100 * time.Millisecond})
		start := time.Now()
		c := submit(t, b, req("1", PriorityNormal))
		time.Sleep(100*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if be.calls.Load() != 0 {
			t.Fatal("sent before the window passed")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantOK(t, c)
		if got := c.Result().Timings.BatchWait; got != 100*time.Millisecond {
			t.Fatalf("batch wait %v, want 100ms", got)
		}
		if time.Since(start) != 100*time.Millisecond {
			t.Fatalf("done after %v", time.Since(start))
		}
	})
}

func TestTriggerUrgentLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MinBatchSize: 5, Window: time.Hour})
		a, c := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityLow))
		synctest.Wait()
		if be.calls.Load() != 0 {
			t.Fatal("sent before any trigger")
		}
		u := submit(t, b, req("u", PriorityUrgent))
		synctest.Wait()
		got := be.batchIDs()
		if len(got) != 1 || len(got[0]) != 3 || got[0][0] != "u" {
			t.Fatalf("batches %v, want one batch of 3 led by the urgent request", got)
		}
		for _, x := range []*Call{a, c, u} {
			wantOK(t, x)
		}
	})
}

func TestTriggerMinBatchWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MinBatchSize: 2, Window: time.Hour})
		submit(t, b, req("1", PriorityNormal))
		synctest.Wait()
		if be.calls.Load() != 0 {
			t.Fatal("a lone request left before min batch size")
		}
		submit(t, b, req("2", PriorityNormal))
		synctest.Wait()
		if got := be.sizes(); !slices.Equal(got, []int{2}) {
			t.Fatalf("batches %v, want [2] at once while the backend is idle", got)
		}
	})
}

func TestTriggerMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MinBatchSize: 5, Window: time.Second, MaxWait: 3 * time.Second})
		low := submit(t, b, req("low", PriorityLow))        // 10×window, capped at 3s
		def := submit(t, b, req("def", PriorityDeferrable)) // max wait
		time.Sleep(3*time.Second - time.Nanosecond)
		synctest.Wait()
		if isDone(low) || isDone(def) {
			t.Fatal("background work left before max wait")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantOK(t, low)
		wantOK(t, def)
	})
}

func TestPriorityDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: be}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MinBatchSize: 5, Window: 100 * time.Millisecond}}),
			WithRoute(Route{Name: "h", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MinBatchSize: 5, Window: 100 * time.Millisecond}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		start := time.Now()
		h := req("high", PriorityHigh)
		h.Route = "h"
		hc := submit(t, b, h)
		nc := submit(t, b, req("normal", PriorityNormal))
		<-hc.Done()
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("HIGH left after %v, want half the window", d)
		}
		<-nc.Done()
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("NORMAL left after %v, want the window", d)
		}
	})
}

func TestLaneIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Second})
		hot, cold := float32(0.9), float32(0)
		var calls []*Call
		for i := range 6 {
			r := req(fmt.Sprint(i), PriorityNormal)
			r.Params.Temperature = &hot
			if i%2 == 0 {
				r.Params.Temperature = &cold
			}
			calls = append(calls, submit(t, b, r))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		got := be.batchIDs()
		slices.SortFunc(got, func(a, b []string) int { return len(a) - len(b) })
		for _, batch := range got {
			slices.Sort(batch)
		}
		slices.SortFunc(got, func(a, b []string) int { return slices.Compare(a, b) })
		want := [][]string{{"0", "2", "4"}, {"1", "3", "5"}}
		if len(got) != 2 || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			t.Fatalf("batches %v, want %v: different temperatures never share a batch", got, want)
		}
		for _, c := range calls {
			wantOK(t, c)
		}
	})
}

func TestIdleLaneReclaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{MinBatchSize: 1}, WithIdleLaneTimeout(time.Minute))
		c := submit(t, b, req("1", PriorityNormal))
		<-c.Done()
		if n := laneCount(b); n != 1 {
			t.Fatalf("%d lanes, want 1", n)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := laneCount(b); n != 0 {
			t.Fatalf("%d lanes after the idle timeout, want 0", n)
		}
		// A new request gets a new lane.
		wantOKDo(t, b, req("2", PriorityNormal))
	})
}

func laneCount(b *Batcher) int {
	b.lanesMu.RLock()
	defer b.lanesMu.RUnlock()
	return len(b.lanes)
}

func wantOKDo(t *testing.T, b *Batcher, r *Request) {
	t.Helper()
	if res, err := b.Do(context.Background(), r); err != nil || res.Text == "" {
		t.Fatalf("Do(%s) = %+v, %v", r.ID, res, err)
	}
}

// A lane left holding MinBatchSize requests right after it cut a full batch
// must send them as soon as the backend frees a slot, not wait out its
// window: it waits for the slot like a due batch.
func TestMinBatchSentWhenTheBackendFreesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 10, MinBatchSize: 2, Window: time.Hour, MaxWait: time.Hour})
		var calls []*Call
		for i := range 2 { // idle backend, min batch: sent at once, held
			calls = append(calls, submit(t, b, req(fmt.Sprint("first", i), PriorityNormal)))
		}
		synctest.Wait()
		for i := range 13 { // a full batch and 3 more wait for the slot
			calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityNormal)))
		}
		synctest.Wait()
		close(be.hold)
		synctest.Wait()
		for _, c := range calls {
			wantOK(t, c)
		}
		if got := be.sizes(); !slices.Equal(got, []int{2, 10, 3}) {
			t.Fatalf("batches %v, want [2 10 3] with no window waited out", got)
		}
	})
}

func TestZeroPriorityIsNormal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 4, BatchConfig{Window: 100 * time.Millisecond})
		start := time.Now()
		c := submit(t, b, &Request{ID: "z", Route: "m", Input: Input{Op: OpCompletion, Prompt: "p"}})
		<-c.Done()
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("a Request with no priority left after %v, want NORMAL's window", d)
		}
	})
}

func TestLanesSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 2, MinBatchSize: 2, Window: time.Hour, MaxWait: time.Hour})
		a, c := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityNormal))
		synctest.Wait() // a and b leave together and hold the only slot
		submit(t, b, req("c", PriorityLow))
		submit(t, b, req("d", PriorityUrgent))
		synctest.Wait()
		ls := b.Lanes()
		if len(ls) != 1 {
			t.Fatalf("%d lanes, want 1", len(ls))
		}
		l := ls[0]
		if l.Route != "m" || l.Backend != "be" || l.InFlight != 2 || l.Queued["low"] != 1 || l.Queued["urgent"] != 1 || l.Queued["normal"] != 0 {
			t.Fatalf("snapshot %+v: want route m on be, 2 in flight, 1 low and 1 urgent queued", l)
		}
		close(be.hold)
		<-a.Done()
		<-c.Done()
	})
}

// TestLaneKeySame checks same against the language's == on keys that
// differ in one field at a time.
func TestLaneKeySame(t *testing.T) {
	rc1, rc2 := &routeConfig{}, &routeConfig{}
	base := laneKey{route: "m", rc: rc1, target: 1, maxTokens: 5, temp: 0.5, topP: 0.9, seed: 3, set: setTemp | setSeed, stop: "a\x00b"}
	variants := []func(k *laneKey){
		func(*laneKey) {},
		func(k *laneKey) { k.rc = rc2 },
		func(k *laneKey) { k.target = 0 },
		func(k *laneKey) { k.maxTokens = 6 },
		func(k *laneKey) { k.temp = 0.7 },
		func(k *laneKey) { k.topP = 1 },
		func(k *laneKey) { k.seed = 4 },
		func(k *laneKey) { k.set = setTemp },
		func(k *laneKey) { k.stop = "a" },
	}
	for i, v := range variants {
		k := base
		v(&k)
		if got, want := base.same(&k), base == k; got != want {
			t.Errorf("variant %d: same = %v, == gives %v", i, got, want)
		}
	}
}

// TestRetriedCallCountsOnce: a flush moves a call to the flushed queue and
// leaves its old entry behind it in its level. When that call failed and
// came back to the lane, the old entry came alive again: the next cut took
// the call twice and the lane lost count of its calls, so the one after
// was never sent (it ended at its deadline, and the lane's owner spun at
// shutdown). make soak lost a request at shutdown this way.
func TestRetriedCallCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := failsFirst()
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Hour, MaxWait: time.Hour})
		d := submit(t, b, req("d", PriorityNormal))
		c := submit(t, b, req("c", PriorityNormal))
		if err := b.FlushCalls(context.Background(), c); err != nil { // c alone, behind d in its level
			t.Fatal(err)
		}
		synctest.Wait() // c failed and waits for its retry
		time.Sleep(time.Second)
		synctest.Wait()                             // c is queued again, behind d
		f := submit(t, b, req("f", PriorityNormal)) // the third: a full batch
		<-d.Done()
		<-c.Done()
		wantOK(t, d)
		wantOK(t, c)
		if got := be.batchIDs(); len(got) != 2 || !slices.Equal(got[1], []string{"d", "c", "f"}) {
			t.Fatalf("batches %v, want [[c] [d c f]]", got)
		}
		<-f.Done()
		wantOK(t, f)
	})
}

// TestRetriedCallKeepsItsDue retries a call into a lane where a call
// admitted after it is queued. The retried call is due already (its
// window ran out before its first attempt) and must go at once, though
// its entry is behind one due a window later.
func TestRetriedCallKeepsItsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := failsFirst()
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 10, MinBatchSize: 3, Window: time.Second, MaxWait: time.Minute})
		start := time.Now()
		c := submit(t, b, req("c", PriorityNormal))
		time.Sleep(time.Second)
		synctest.Wait()                             // c went alone at its due, failed, and waits for its retry
		d := submit(t, b, req("d", PriorityNormal)) // due a second from now
		<-c.Done()
		wantOK(t, c)
		if took := time.Since(start); took >= 2*time.Second {
			t.Errorf("c took %v: its retry waited for d's window (due at 2s)", took)
		}
		<-d.Done()
		wantOK(t, d)
		if got := be.batchIDs(); len(got) != 2 || len(got[1]) != 2 {
			t.Fatalf("batches %v, want [[c] [d c]] (or [c d])", got)
		}
	})
}

// TestEndedCallsLeaveNoEntries cancels every queued call of a lane while
// its backend is busy: the lane's heap empties without a cut, and its
// levels must not keep the calls' tombstones (they were kept until the
// lane's next batch).
func TestEndedCallsLeaveNoEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, be, first := busyBackend(t)
		var calls []*Call
		for i := range 40 {
			calls = append(calls, submit(t, b, req(fmt.Sprint(i), Priority(i%5))))
		}
		synctest.Wait()
		var l *lane
		b.lanesMu.RLock()
		for _, one := range b.lanes {
			l = one // the route's one lane
		}
		b.lanesMu.RUnlock()
		if len(l.heap) != len(calls) {
			t.Fatalf("%d calls queued, want %d", len(l.heap), len(calls))
		}
		for _, c := range calls {
			c.Cancel()
			<-c.Done()
		}
		synctest.Wait() // the owner has taken the calls out
		entries := 0
		for q := range l.queues {
			for _, f := range l.queues[q].flows {
				entries += f.q.len()
			}
		}
		heap := len(l.heap)
		close(be.hold)
		<-first.Done()
		wantOK(t, first)
		if heap != 0 || entries != 0 {
			t.Fatalf("heap %d, level entries %d; want 0 and 0", heap, entries)
		}
	})
}

// TestFifoEntries checks the fifo's entry numbers against a plain slice
// through pushes, pops (with the compaction) and kills.
func TestFifoEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var q fifo
	q.off = math.MaxUint32 - 100 // the numbers wrap
	type ent struct {
		c *Call
		e uint32
	}
	var model []ent // what q holds, head first; nil c: a tombstone
	for step := range 20000 {
		pushes := 6 // of 10: it grows, then (every other 2,000 steps) it empties
		if step/2000%2 == 1 {
			pushes = 2
		}
		switch op := rng.IntN(10); {
		case op < pushes:
			c := new(Call)
			model = append(model, ent{c, q.push(c)})
		case op < 8 && len(model) > 0:
			q.pop()
			model = model[1:]
		case len(model) > 0:
			i := rng.IntN(len(model))
			if model[i].c != nil {
				q.kill(model[i].e, model[i].c)
				model[i].c = nil
			}
		}
		if q.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, q.len(), len(model))
		}
		for i, m := range model {
			if q.at(i) != m.c {
				t.Fatalf("step %d: entry %d is %p, want %p", step, i, q.at(i), m.c)
			}
		}
	}
}

// TestUnwaitedFlushesLeaveNoWaits flushes one queued call over and over
// with a context that is already done, as a stream does for each of its
// Flush messages, while the backend is busy so that the call stays queued.
// Nobody waits on those flushes, so the lane keeps no wait for them: before,
// it kept one per flush until the call left. A waited flush still waits for
// the call to be sent.
func TestUnwaitedFlushesLeaveNoWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, be, first := busyBackend(t)
		c := submit(t, b, req("c", PriorityNormal))
		done, cancel := context.WithCancel(t.Context())
		cancel()
		for range 100 {
			// nil when the lane handled the flush before FlushCalls looked.
			if err := b.FlushCalls(done, c); err != nil && !errors.Is(err, ErrCanceled) {
				t.Fatalf("FlushCalls with a done context: %v, want ErrCanceled or nil", err)
			}
		}
		waited := make(chan error, 1)
		go func() { waited <- b.FlushCalls(t.Context(), c) }()
		synctest.Wait()
		l := c.lane.Load()
		waits, flushed := len(l.flushOf[c]), c.qidx == qFlushed
		select {
		case err := <-waited:
			t.Fatalf("the waited flush returned %v while its call was still queued", err)
		default:
		}
		close(be.hold)
		if err := <-waited; err != nil {
			t.Fatalf("waited flush: %v", err)
		}
		<-first.Done()
		wantOK(t, first)
		<-c.Done()
		wantOK(t, c)
		if waits != 1 || !flushed {
			t.Fatalf("the queued call has %d flush waits (flushed: %v); want only the waited flush's", waits, flushed)
		}
	})
}

// TestDrainKeepsInboxOrder: the owner applies pushes and the other
// messages in the order they were sent, though pushes come in apart from
// them: a flush takes the calls pushed before it and not one pushed
// after, and a forget sent after a flush still takes its call out.
func TestDrainKeepsInboxOrder(t *testing.T) {
	be := BackendFunc(func(context.Context, *Batch, []Response) error { return nil })
	b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 100, Window: time.Hour})
	rc := b.route("m")
	l := newLane(b, keyOf(req("x", PriorityNormal), rc, 0), rc) // no owner: the test drains
	defer l.timer.Stop()
	push := func(id string) *Call {
		r := req(id, PriorityNormal)
		c := &Call{req: r, b: b, rc: rc, heapIdx: -1, prio: r.Priority}
		if !l.push(c) {
			t.Fatalf("push(%s) refused", id)
		}
		return c
	}
	before, forgotten := push("before"), push("forgotten")
	if !l.send(msg{kind: msgFlush, fw: newFlushWait(context.Background(), nil)}) {
		t.Fatal("flush refused")
	}
	l.forget(forgotten)
	after := push("after")
	l.drain()
	if before.qidx != qFlushed || !l.holds(before) {
		t.Errorf("the call pushed before the flush: flushed %v, queued %v", before.qidx == qFlushed, l.holds(before))
	}
	if l.holds(forgotten) {
		t.Error("the call forgotten after the flush is still queued")
	}
	if after.qidx == qFlushed || !l.holds(after) {
		t.Errorf("the call pushed after the flush: flushed %v, queued %v", after.qidx == qFlushed, l.holds(after))
	}
	if got := len(l.heap); got != 2 {
		t.Errorf("%d calls queued, want 2", got)
	}
}
