package batcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestPriorityOrderWhenCapacityIsScarce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 1}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
			WithRoute(Route{Name: "n", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		blocker := submit(t, b, req("blocker", PriorityNormal))
		synctest.Wait()
		// Two lanes and every priority queue up behind the one busy slot.
		var calls []*Call
		for i, p := range []Priority{PriorityDeferrable, PriorityLow, PriorityNormal, PriorityHigh, PriorityUrgent, PriorityLow, PriorityUrgent} {
			r := req(fmt.Sprintf("%s-%d", p, i), p)
			if i%2 == 1 {
				r.Route = "n"
			}
			calls = append(calls, submit(t, b, r))
		}
		synctest.Wait()
		for range calls {
			be.hold <- struct{}{}
			synctest.Wait()
		}
		be.hold <- struct{}{}
		synctest.Wait()
		wantOK(t, blocker)
		var order []string
		for _, ids := range be.batchIDs()[1:] {
			order = append(order, ids...)
		}
		want := []string{"urgent-4", "urgent-6", "high-3", "normal-2", "low-1", "low-5", "deferrable-0"}
		if !slices.Equal(order, want) {
			t.Fatalf("dispatch order %v, want %v", order, want)
		}
	})
}

func TestNoStarvationUnderUrgentFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{latency: 100 * time.Millisecond}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithAgingStep(time.Second))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 3 { // three producers keep URGENT work queued at all times
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					wantOKDo(t, b, req(fmt.Sprint("u", g, "-", i), PriorityUrgent))
				}
			})
		}
		synctest.Wait() // the flood holds the slot and keeps URGENT work queued
		start := time.Now()
		low := submit(t, b, req("low", PriorityLow))
		starved := time.NewTimer(time.Minute)
		select {
		case <-low.Done():
		case <-starved.C:
			t.Error("LOW starved for a minute")
			low.Cancel()
		}
		close(stop)
		wg.Wait()
		wantOK(t, low)
		// LOW climbs a priority per second of waiting: it outranks URGENT work
		// once it has waited 3s longer than the oldest URGENT request (a few
		// 100ms slots here).
		if waited := time.Since(start); waited < 3*time.Second || waited > 4*time.Second {
			t.Fatalf("LOW waited %v under a flood of URGENT work, want 3s to 4s", waited)
		}
		if n := be.calls.Load(); n < 25 {
			t.Fatalf("only %d calls: the flood did not saturate the slot", n)
		}
	})
}

func TestDeadlineWhileQueuedBehindBusyBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		busy := submit(t, b, req("busy", PriorityNormal))
		synctest.Wait()
		start := time.Now()
		r := req("short", PriorityNormal)
		r.Timeout = 50 * time.Millisecond
		short := submit(t, b, r)
		<-short.Done()
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("expired after %v, want 50ms", d)
		}
		wantErr(t, short, ErrDeadline)
		if b.Pending() != 1 {
			t.Fatalf("pending %d, want 1: the expired request left the queue", b.Pending())
		}
		close(be.hold)
		synctest.Wait()
		wantOK(t, busy)
		if n := be.calls.Load(); n != 1 {
			t.Fatalf("%d upstream calls, want 1: the expired request was never sent", n)
		}
	})
}

func TestDeadlineInFlightSparesBatchMates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 2, MinBatchSize: 2})
		r := req("short", PriorityNormal)
		r.Timeout = 50 * time.Millisecond
		start := time.Now()
		short := submit(t, b, r)
		long := submit(t, b, req("long", PriorityNormal))
		<-short.Done()
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("in-flight request expired after %v, want 50ms", d)
		}
		wantErr(t, short, ErrDeadline)
		if isDone(long) {
			t.Fatal("the batch-mate ended with its neighbour")
		}
		close(be.hold)
		synctest.Wait()
		wantOK(t, long)
		if errs := be.ctxErrs; len(errs) != 1 || errs[0] != nil {
			t.Fatalf("backend saw ctx errors %v: one request's deadline cancelled the batch", errs)
		}
	})
}

func TestCancelSparesBatchMates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3})
		a, c, d := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityNormal)), submit(t, b, req("c", PriorityNormal))
		synctest.Wait()
		a.Cancel()
		wantErr(t, a, ErrCanceled)
		c.Cancel()
		wantErr(t, c, ErrCanceled)
		if isDone(d) {
			t.Fatal("cancelling two requests ended the third")
		}
		close(be.hold)
		synctest.Wait()
		wantOK(t, d)
		if errs := be.ctxErrs; len(errs) != 1 || errs[0] != nil {
			t.Fatalf("backend saw ctx errors %v", errs)
		}
	})
}

func TestCancelEveryoneCancelsTheUpstreamCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 2, MinBatchSize: 2})
		a, c := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityNormal))
		synctest.Wait()
		a.Cancel()
		c.Cancel()
		synctest.Wait()
		if errs := be.ctxErrs; len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
			t.Fatalf("backend saw ctx errors %v, want the batch cancelled once nobody awaits it", errs)
		}
	})
}

func TestCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 1, BatchConfig{Window: time.Second})
		c := submit(t, b, req("a", PriorityNormal))
		c.Cancel()
		wantErr(t, c, ErrCanceled)
		if b.Pending() != 0 {
			t.Fatalf("pending %d after cancel", b.Pending())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if be.calls.Load() != 0 {
			t.Fatal("a cancelled request was sent")
		}
	})
}

func TestDoHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		defer close(be.hold)
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		if _, err := b.Do(ctx, req("a", PriorityNormal)); !errors.Is(err, ErrDeadline) {
			t.Fatalf("Do = %v, want ErrDeadline", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		go cancel()
		if _, err := b.Do(ctx, req("b", PriorityNormal)); !errors.Is(err, ErrCanceled) {
			t.Fatalf("Do = %v, want ErrCanceled", err)
		}
	})
}

func TestBackpressureQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, WithQueueCapacity(2))
		x, y := submit(t, b, req("x", PriorityNormal)), submit(t, b, req("y", PriorityNormal))
		if _, err := b.Submit(context.Background(), req("z", PriorityUrgent)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Submit past capacity = %v, want ErrQueueFull", err)
		}
		close(be.hold)
		synctest.Wait()
		wantOK(t, x)
		wantOK(t, y)
		wantOKDo(t, b, req("z", PriorityUrgent))
	})
}

func TestShutdownSendsPartialBatchesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 2, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Hour})
		var calls []*Call
		for i := range 7 {
			calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityLow)))
		}
		synctest.Wait()
		start := time.Now()
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("shutdown took %v: it waited out windows", d)
		}
		for _, c := range calls {
			wantOK(t, c)
		}
		if _, err := b.Submit(context.Background(), req("late", PriorityUrgent)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Submit after shutdown = %v, want ErrClosed", err)
		}
		if n := laneCount(b); n != 0 {
			t.Fatalf("%d lanes left after shutdown", n)
		}
	})
}

func TestShutdownDrainDeadlineFailsTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})} // never released
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 2, MinBatchSize: 1})
		var calls []*Call
		for i := range 5 {
			calls = append(calls, submit(t, b, req(fmt.Sprint(i), PriorityNormal)))
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := b.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want the drain deadline", err)
		}
		for _, c := range calls {
			wantErr(t, c, ErrShutdown)
		}
		if b.Pending() != 0 {
			t.Fatalf("pending %d after shutdown", b.Pending())
		}
	})
}

func TestEventsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 2, BatchConfig{MaxBatchSize: 4})
		rec := &recorder{}
		var calls []*Call
		for i := range 10 {
			r := req(fmt.Sprint(i), PriorityNormal)
			r.Sink = rec
			calls = append(calls, submit(t, b, r))
		}
		for _, c := range calls {
			<-c.Done()
			want := []EventKind{EventQueued, EventBatched, EventDispatched, EventDone}
			if got := rec.of(c.req.ID); !slices.Equal(got, want) {
				t.Fatalf("%s: events %v, want %v", c.req.ID, got, want)
			}
		}
	})
}

// doneOnly is a recorder that takes no progress events (ProgressFilter).
type doneOnly struct{ recorder }

func (*doneOnly) WantsProgress() bool { return false }

// progressFilter is a recorder whose ProgressFilter says yes.
type progressFilter struct{ recorder }

func (*progressFilter) WantsProgress() bool { return true }

func TestProgressFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := failsFirst() // the first attempt fails: a retry follows
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		only, all := &doneOnly{}, &progressFilter{}
		r := req("r", PriorityNormal)
		r.Sink = only
		c := submit(t, b, r)
		<-c.Done()
		wantOK(t, c)
		if got, want := only.of("r"), []EventKind{EventDone}; !slices.Equal(got, want) {
			t.Fatalf("WantsProgress false: events %v, want %v", got, want)
		}
		r = req("s", PriorityNormal)
		r.Sink = all
		c = submit(t, b, r)
		<-c.Done()
		wantOK(t, c)
		if got, want := all.of("s"), []EventKind{EventQueued, EventBatched, EventDispatched, EventDone}; !slices.Equal(got, want) {
			t.Fatalf("WantsProgress true: events %v, want %v", got, want)
		}
		if n := be.calls.Load(); n != 3 {
			t.Fatalf("%d upstream calls, want 3 (one retried)", n)
		}
	})
}

func TestNothingAfterDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		rec := &recorder{}
		r := req("a", PriorityNormal)
		r.Sink = rec
		c := submit(t, b, r)
		synctest.Wait()
		c.Cancel()
		close(be.hold)
		synctest.Wait()
		if got, want := rec.of("a"), []EventKind{EventQueued, EventBatched, EventDispatched, EventDone}; !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
	})
}

func TestPartialFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			out[1] = Response{Err: &UpstreamError{Class: ClassInvalidRequest, Message: "bad item"}}
			return nil
		}}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3})
		a, c, d := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityNormal)), submit(t, b, req("c", PriorityNormal))
		synctest.Wait()
		wantOK(t, a)
		wantOK(t, d)
		if got := ClassOf(c.Result().Err); got != ClassInvalidRequest {
			t.Fatalf("failed item's class %v, want invalid_request", got)
		}
	})
}

func TestBackendPanicBecomesAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := BackendFunc(func(context.Context, *Batch, []Response) error { panic("boom") })
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
		_, err := b.Do(context.Background(), req("a", PriorityNormal))
		var ue *UpstreamError
		if !errors.As(err, &ue) || ue.Message != "backend failed" {
			t.Fatalf("Do = %v, want an upstream error", err)
		}
	})
}

func TestConcurrencyLimitHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{latency: 10 * time.Millisecond}
		b := newTest(t, be, 3, BatchConfig{MaxBatchSize: 2, MinBatchSize: 1})
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() { wantOKDo(t, b, req(fmt.Sprint(i), Priority(i%5))) })
		}
		wg.Wait()
		if m := be.maxInflight.Load(); m != 3 {
			t.Fatalf("max concurrent dispatches %d, want exactly the limit 3", m)
		}
	})
}

// TestSubmitConcurrentSafe races submitters, cancellers, deadlines, failures
// and shutdown, and checks that every admitted request ends exactly once.
func TestSubmitConcurrentSafe(t *testing.T) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	be := &fakeBackend{fail: func(b *Batch, out []Response) error {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(10) == 0 {
			return &UpstreamError{Class: ClassServer, Message: "injected"}
		}
		if rng.IntN(10) == 0 {
			out[0].Err = &UpstreamError{Class: ClassServer, Message: "injected item"}
		}
		return nil
	}}
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 3,
			Retry: RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 7, Window: time.Millisecond}}),
		WithQueueCapacity(64),
	)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var wg sync.WaitGroup
	var calls sync.Map
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				r := req(fmt.Sprintf("%d-%d", g, i), Priority(i%5))
				r.Sink = rec
				if i%7 == 0 {
					r.Timeout = time.Duration(i%3) * time.Millisecond
				}
				c, err := b.Submit(context.Background(), r)
				if err != nil {
					if !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrClosed) {
						t.Errorf("Submit: %v", err)
					}
					continue
				}
				calls.Store(r.ID, c)
				if i%5 == 1 {
					c.Cancel()
				}
				if i%11 == 4 { // as a stream flushes: its own calls only
					if err := b.FlushCalls(context.Background(), c); err != nil {
						t.Errorf("FlushCalls: %v", err)
					}
				}
				if i%3 == 0 {
					<-c.Done()
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			if err := b.Flush(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	// Every call can end within its time: a drain that runs out lost one.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	calls.Range(func(k, v any) bool {
		n++
		c := v.(*Call)
		if !isDone(c) {
			t.Errorf("%s: no result after shutdown", k)
		}
		ev := rec.of(k.(string))
		if len(ev) == 0 || ev[len(ev)-1] != EventDone || slices.Index(ev, EventDone) != len(ev)-1 {
			t.Errorf("%s: events %v, want exactly one done, last", k, ev)
		}
		return true
	})
	if n == 0 || b.Pending() != 0 {
		t.Fatalf("%d calls, %d pending", n, b.Pending())
	}
}

// holdSubmit starts a Submit and returns once it is held at the hook: it
// goes on when resume is closed, and its error arrives on errc.
func holdSubmit(b *Batcher, hook *func()) (resume chan struct{}, errc chan error) {
	entered := make(chan struct{})
	resume, errc = make(chan struct{}), make(chan error, 1)
	*hook = func() {
		close(entered)
		<-resume
	}
	go func() {
		_, err := b.Submit(context.Background(), req("late", PriorityNormal))
		errc <- err
	}()
	<-entered
	return resume, errc
}

// TestCancelWhileClaimingSparesBatchMates cancels the first call of a
// batch of two the moment its run claims it, before the second is
// claimed: the batch must still go upstream for the second, which gets
// its completion. (The run's live count used to touch zero in between and
// cancel the upstream call, so the second ended with "context canceled".)
func TestCancelWhileClaimingSparesBatchMates(t *testing.T) {
	be := &fakeBackend{latency: time.Millisecond} // it watches its context
	b, err := New(
		// No retries: a cancelled upstream call shows as the second's error.
		WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 1, Retry: RetryPolicy{MaxRetries: -1}}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 2, Window: time.Hour, MaxWait: time.Hour}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	var once sync.Once
	b.testHookClaimed = func(c *Call) {
		once.Do(c.Cancel)
	}
	first := submit(t, b, req("first", PriorityNormal))
	second := submit(t, b, req("second", PriorityNormal))
	if err := first.Result().Err; !errors.Is(err, ErrCanceled) {
		t.Fatalf("first: %v, want ErrCanceled", err)
	}
	if res := second.Result(); res.Err != nil || res.Text != "re:prompt second" {
		t.Fatalf("second: %q, %v; want its completion", res.Text, res.Err)
	}
}
