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

// rateLimitedOnce fails its first Dispatch with a 429 that asks for a wait
// of retryAfter; the rest succeed.
func rateLimitedOnce(retryAfter time.Duration) *fakeBackend {
	be := &fakeBackend{}
	be.fail = func(*Batch, []Response) error {
		if be.calls.Load() == 1 {
			return &UpstreamError{Class: ClassRateLimit, StatusCode: 429, Message: "slow down",
				RateLimit: &RateLimitInfo{RetryAfter: retryAfter, RemainingRequests: -1, RemainingTokens: -1}}
		}
		return nil
	}
	return be
}

// TestRetryTimerAfterShutdownAbort: a call waiting out its backoff in the
// backend owner's queue when Shutdown's drain deadline passes ends with
// ErrShutdown, once; the backoff's end, later, neither dispatches it nor
// gives it a second result.
func TestRetryTimerAfterShutdownAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := rateLimitedOnce(10 * time.Second)
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 1}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
			WithQueueTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		r := req("r", PriorityNormal)
		r.Sink = rec
		c := submit(t, b, r)
		synctest.Wait() // dispatched, 429, waiting out its 10 s in the owner's queue
		if got := rec.of("r"); !slices.Contains(got, EventRetrying) || isDone(c) {
			t.Fatalf("events %v, done %v: want the call waiting out a retry", got, isDone(c))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want the drain's deadline", err)
		}
		if res := c.Result(); !errors.Is(res.Err, ErrShutdown) {
			t.Fatalf("result %v, want ErrShutdown", res.Err)
		}
		time.Sleep(time.Minute) // well past the backoff
		synctest.Wait()
		if n := be.calls.Load(); n != 1 {
			t.Fatalf("%d dispatches, want the first alone", n)
		}
		got := rec.of("r")
		done := 0
		for _, k := range got {
			if k == EventDone {
				done++
			}
		}
		if done != 1 || got[len(got)-1] != EventDone {
			t.Fatalf("events %v, want exactly one EventDone, last", got)
		}
		if n := b.Pending(); n != 0 {
			t.Fatalf("%d pending", n)
		}
	})
}

// TestRetryTimerDuringShutdownDrain: a backoff that ends after Shutdown
// began, while it drains, sends the call again, and the call ends once,
// with the answer.
func TestRetryTimerDuringShutdownDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := rateLimitedOnce(2 * time.Second)
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 1}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
			WithQueueTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		r := req("r", PriorityNormal)
		r.Sink = rec
		c := submit(t, b, r)
		synctest.Wait()
		if isDone(c) {
			t.Fatal("done before its retry")
		}
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		wantOK(t, c)
		if n := be.calls.Load(); n != 2 {
			t.Fatalf("%d dispatches, want 2 (the 429 and the retry)", n)
		}
		if got := rec.of("r"); got[len(got)-1] != EventDone || slices.Index(got, EventDone) != len(got)-1 {
			t.Fatalf("events %v, want one EventDone, last", got)
		}
	})
}

// TestBackendOwnerConcurrentSafe races every sender of the backend owner's
// messages under the race detector: lanes of several parameter sets asking
// and giving back, workers releasing (some after a 429, some retried), the
// coordinator's share and pauses, Reconfigure's limits and Stats. Every
// call ends, and once Shutdown returns no permit is out.
func TestBackendOwnerConcurrentSafe(t *testing.T) {
	var n atomic.Int32
	be := &fakeBackend{}
	be.fail = func(b *Batch, out []Response) error {
		if n.Add(1)%7 == 0 {
			return &UpstreamError{Class: ClassServer, Message: "try again"}
		}
		return nil
	}
	co := &fakeCoordinator{}
	route := Route{Name: "m", Op: OpCompletion, Backend: "be", Batch: BatchConfig{MaxBatchSize: 4, MinBatchSize: 1}}
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: be, MaxConcurrency: 3, RPM: 600000, TPM: 60000000,
			Retry: RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}}),
		WithRoute(route), WithCoordinator(co))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() { // the coordinator, Reconfigure and Stats, all the while
		defer side.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			co.local.Share([]float64{1, 0.5, 1}[i%3])
			co.local.Pause(time.Now().Add(time.Millisecond))
			if err := b.Reconfigure([]BackendConfig{{Name: "be", Backend: be, MaxConcurrency: 2 + i%3, RPM: 600000, TPM: 60000000,
				Retry: RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}}}, []Route{route}); err != nil {
				t.Error(err)
				return
			}
			_ = b.Stats()
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				r := req(fmt.Sprintf("%d-%d", g, i), PriorityNormal)
				r.Params.MaxTokens = int32(1 + g%3) // three lanes
				c, err := b.Submit(context.Background(), r)
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					c.Cancel()
				}
				<-c.Done()
			}
		}()
	}
	wg.Wait()
	close(stop)
	side.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats()[0]; st.InFlight != 0 {
		t.Fatalf("%d permits out after Shutdown", st.InFlight)
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("%d pending", n)
	}
}
