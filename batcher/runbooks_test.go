package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunBooksBalanceOnEveryPath drives calls through every way a batch
// run lets go of them (delivered by the run, plain or not; cancelled
// while the run delivers; a context's or the request's deadline; a retry;
// a fallback; a dedup group; a cache store; a sink; a streamed request;
// an eviction; Shutdown's drain, and in odd rounds its abort) from many
// goroutines, with cancels fired by the backend itself just before
// Dispatch returns, so that they race the run's delivery. Then:
//   - every accepted Submit has its result once Shutdown returned, and
//     each sink saw exactly one EventDone;
//   - every run that claimed a call has let go of all of them: its refs
//     and alive counts are back at zero. A call the run delivered and
//     also let go of in Call.ended would take them below zero; one booked
//     nowhere would leave them above it (and the run out of its pool).
func TestRunBooksBalanceOnEveryPath(t *testing.T) {
	for round := range 4 {
		runBooksRound(t, round, round%2 == 1)
	}
}

func runBooksRound(t *testing.T, round int, abort bool) {
	var (
		atDelivery sync.Map // request ID -> func(): fired by the backend as it returns
		flaky      = flakyFail(uint64(round), 9)
	)
	// fire fires the cancels registered for b's requests, each on its own
	// goroutine.
	fire := func(b *Batch) {
		for _, r := range b.Requests {
			if f, ok := atDelivery.LoadAndDelete(r.ID); ok {
				go f.(func())()
			}
		}
	}
	// cancelOnReturn fires them and sometimes fails the batch or one
	// request.
	cancelOnReturn := func(b *Batch, out []Response) error {
		fire(b)
		return flaky(b, out)
	}
	main := &fakeStreamer{words: []string{"a", "b", "c"}}
	main.latency, main.fail = 100*time.Microsecond, cancelOnReturn
	backup := &fakeBackend{fail: func(b *Batch, _ []Response) error {
		fire(b)
		return nil
	}}
	b, err := New(
		WithCache(&mapCache{}),
		WithBackend(BackendConfig{Name: "be", Backend: main, MaxConcurrency: 3,
			Retry:   RetryPolicy{MaxRetries: 1, InitialBackoff: 100 * time.Microsecond, MaxBackoff: time.Millisecond},
			Breaker: BreakerConfig{Consecutive: -1}}),
		WithBackend(BackendConfig{Name: "backup", Backend: backup, MaxConcurrency: 2}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Fallbacks: []Target{{Backend: "backup"}},
			Batch: BatchConfig{MaxBatchSize: 8, Window: 200 * time.Microsecond, MaxWait: 2 * time.Millisecond}}),
		WithQueueCapacity(48),
	)
	if err != nil {
		t.Fatal(err)
	}
	var (
		runsMu sync.Mutex
		runs   = map[*batchRun]struct{}{}
	)
	b.testHookClaimed = func(c *Call) {
		r := c.run.Load() // the run claiming c
		runsMu.Lock()
		runs[r] = struct{}{}
		runsMu.Unlock()
	}
	rec := &recorder{}
	var (
		wg       sync.WaitGroup
		callsMu  sync.Mutex
		accepted []*Call
		sinkIDs  []string
		results  atomic.Int64
		busy     = make(chan struct{})
		busyOnce sync.Once
	)
	check := func(id, prompt string, res Result, err error) bool {
		switch {
		case err == nil:
			if want := "re:" + prompt; res.Text != want {
				t.Errorf("round %d, %s: text %q, want %q", round, id, res.Text, want)
			}
		case errors.Is(err, ErrClosed):
			return false
		case errors.Is(err, ErrCanceled), errors.Is(err, ErrDeadline), errors.Is(err, ErrEvicted),
			errors.Is(err, ErrQueueFull), errors.Is(err, ErrShutdown):
		default:
			var ue *UpstreamError
			if !errors.As(err, &ue) {
				t.Errorf("round %d, %s: unexpected error %v", round, id, err)
			}
		}
		if results.Add(1) == 1500 {
			busyOnce.Do(func() { close(busy) })
		}
		return true
	}
	for g := range 12 {
		wg.Go(func() {
			zero, seed := float32(0), int64(7)
			for i := 0; ; i++ {
				id := fmt.Sprintf("%d-%d-%d", round, g, i)
				r := &Request{ID: id, Route: "m", Priority: Priority(i % numPriorities), Input: Input{Op: OpCompletion, Prompt: id}}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				submitted := false
				switch i % 10 {
				case 1: // Do, its context cancelled as the batch returns
					ctx, cancel = context.WithCancel(ctx)
					atDelivery.Store(id, func() { cancel() })
				case 2, 5: // Submit (5: with a sink), cancelled as the batch returns
					if i%10 == 5 {
						r.Sink = rec
					}
					var cp atomic.Pointer[Call]
					atDelivery.Store(id, func() {
						if c := cp.Load(); c != nil {
							c.Cancel()
						}
					})
					c, err := b.Submit(ctx, r)
					if err != nil {
						if !check(id, r.Input.Prompt, Result{}, err) {
							return
						}
						continue
					}
					cp.Store(c)
					callsMu.Lock()
					accepted = append(accepted, c)
					if r.Sink != nil {
						sinkIDs = append(sinkIDs, id)
					}
					callsMu.Unlock()
					if i%4 != 0 { // the rest stay pending into Shutdown
						<-c.Done()
					}
					submitted = true
				case 3:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%4)*100*time.Microsecond)
				case 4:
					r.Timeout = time.Duration(i%3) * 200 * time.Microsecond
				case 6: // a dedup group, whose leader may be cancelled as the batch returns
					r.Params.Temperature, r.Params.Seed = &zero, &seed
					r.Input.Prompt = fmt.Sprintf("shared-%d-%d", round, i)
					ctx, cancel = context.WithCancel(ctx)
					atDelivery.Store(id, func() { cancel() })
				case 7: // stored in the cache, cancelled as the batch returns
					r.Cache = CacheRefresh
					ctx, cancel = context.WithCancel(ctx)
					atDelivery.Store(id, func() { cancel() })
				case 8: // streamed, cancelled at once now and then
					r.Stream = true
					c, err := b.Submit(ctx, r)
					if err != nil {
						if !check(id, r.Input.Prompt, Result{}, err) {
							return
						}
						continue
					}
					if i%20 == 8 {
						go c.Cancel()
					}
					callsMu.Lock()
					accepted = append(accepted, c)
					callsMu.Unlock()
					<-c.Done()
					submitted = true
				case 9:
					var cctx context.Context
					cctx, cancel = context.WithCancel(ctx)
					ctx = cctx
					go cancel()
				}
				if submitted {
					continue
				}
				res, err := b.Do(ctx, r)
				cancel()
				if !check(id, r.Input.Prompt, res, err) {
					return
				}
			}
		})
	}
	<-busy
	if abort {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the drain ends at once: abort meets runs delivering
		_ = b.Shutdown(ctx)
	}
	wait, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	if err := b.Shutdown(wait); err != nil {
		t.Fatalf("round %d: Shutdown: %v", round, err)
	}
	wg.Wait()
	if n := b.Pending(); n != 0 {
		t.Fatalf("round %d: %d pending after Shutdown", round, n)
	}
	for _, c := range accepted {
		if !isDone(c) {
			t.Fatalf("round %d: %s accepted, no result after Shutdown", round, c.req.ID)
		}
		if err := c.Result().Err; err != nil && !errors.Is(err, ErrCanceled) && !errors.Is(err, ErrShutdown) &&
			!errors.Is(err, ErrDeadline) && !errors.Is(err, ErrEvicted) && !errors.Is(err, ErrClosed) {
			var ue *UpstreamError
			if !errors.As(err, &ue) {
				t.Errorf("round %d, %s: unexpected error %v", round, c.req.ID, err)
			}
		}
	}
	for _, id := range sinkIDs {
		n := 0
		for _, k := range rec.of(id) {
			if k == EventDone {
				n++
			}
		}
		if n != 1 {
			t.Errorf("round %d, %s: %d EventDone, want 1", round, id, n)
		}
	}
	for r := range runs {
		if refs, alive := r.refs.Load(), r.alive.Load(); refs != 0 || alive != 0 {
			t.Errorf("round %d: a run's refs %d, alive %d after Shutdown; want 0 and 0", round, refs, alive)
		}
	}
	if len(runs) == 0 {
		t.Fatalf("round %d: no run claimed a call", round)
	}
}

// TestBatchBookedBeforeAnyWakes: a batch run delivers its calls' results
// in two passes, the books of all first, then the wake-ups: so the first
// caller woken already finds its whole batch out of the pending count
// (and, were the batcher closing, drained).
func TestBatchBookedBeforeAnyWakes(t *testing.T) {
	for range 20 {
		func() {
			be := &fakeBackend{hold: make(chan struct{})}
			b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 8, MinBatchSize: 8, Window: time.Hour, MaxWait: time.Hour})
			done := make(chan int, 8)
			var calls []*Call
			for i := range 8 {
				c := submit(t, b, req(fmt.Sprint(i), PriorityNormal))
				calls = append(calls, c)
				go func() {
					<-c.Done()
					done <- b.Pending()
				}()
			}
			close(be.hold)
			for range 8 {
				if n := <-done; n != 0 {
					t.Fatalf("a caller woke with %d calls of its batch still pending", n)
				}
			}
			for _, c := range calls {
				wantOK(t, c)
			}
		}()
	}
}
