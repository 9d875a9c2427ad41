package batcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRetriesUsedUpMoveToTheNextTarget: a request whose retries on its
// backend are used up on a server error moves to the route's fallback
// within its deadline, instead of failing while the breaker is still
// closed; the move and the breaker's opening are logged.
func TestRetriesUsedUpMoveToTheNextTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &fakeBackend{fail: func(*Batch, []Response) error {
			return &UpstreamError{Class: ClassServer, StatusCode: 503, Message: "down"}
		}}
		backup := &fakeBackend{}
		var logs syncBuffer
		b, err := New(
			WithBackend(BackendConfig{Name: "primary", Backend: primary,
				Retry: RetryPolicy{MaxRetries: 1, InitialBackoff: 10 * time.Millisecond}, Breaker: BreakerConfig{Consecutive: 4}}),
			WithBackend(BackendConfig{Name: "backup", Backend: backup}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "primary", Model: "big",
				Fallbacks: []Target{{Backend: "backup", Model: "small"}}, Batch: BatchConfig{MinBatchSize: 1}}),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := b.Do(ctx, req("lone", PriorityNormal))
		if err != nil || res.Backend != "backup" {
			t.Fatalf("Do = %+v, %v; want the backup to serve it once the primary's retries were used up", res, err)
		}
		if n := primary.calls.Load(); n != 2 {
			t.Fatalf("primary saw %d calls, want 2 (an attempt and its one retry)", n)
		}
		if st := b.Stats()[0]; st.Fallbacks != 1 {
			t.Fatalf("primary's fallbacks = %d, want 1", st.Fallbacks)
		}
		// Two more requests fail over the same way and open the breaker:
		// four failures in a row.
		for _, id := range []string{"x", "y"} {
			if _, err := b.Do(ctx, req(id, PriorityNormal)); err != nil {
				t.Fatal(err)
			}
		}
		out := logs.String()
		if !strings.Contains(out, "request moved to a fallback") || !strings.Contains(out, "backend=primary") {
			t.Fatalf("logs %q: want the move to the fallback", out)
		}
		if !strings.Contains(out, "level=WARN msg=\"batcher: breaker open\"") {
			t.Fatalf("logs %q: want the breaker's opening at WARN", out)
		}
		if n := strings.Count(out, "request moved to a fallback"); n != 1 {
			t.Fatalf("%d fallback lines within a second, want 1 (rate-limited)", n)
		}
	})
}

// TestHungCallIsRetriedWithinTheDeadline: with no attempt timeout
// configured, an attempt gets a share of the deadline left, so a hung call
// is cut short and retried while the request still has time.
func TestHungCallIsRetriedWithinTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		be := BackendFunc(func(ctx context.Context, b *Batch, out []Response) error {
			if calls.Add(1) == 1 {
				<-ctx.Done() // hangs until cut short
				return ctx.Err()
			}
			for i := range out {
				out[i].Text = "ok"
			}
			return nil
		})
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		res, err := b.Do(ctx, req("hung", PriorityNormal))
		if err != nil || res.Attempts != 2 {
			t.Fatalf("Do = %+v, %v; want success on the second attempt", res, err)
		}
		// 20 s over 4 attempts: the first is cut at 5 s.
		if d := time.Since(start); d < 5*time.Second || d > 7*time.Second {
			t.Fatalf("took %v, want the first attempt cut at 5s and a retry within the backoff", d)
		}
	})
}

// TestInvalidResponseRetriedOnce: a garbled answer is retried once, not
// twice.
func TestInvalidResponseRetriedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		garbled := &UpstreamError{Class: ClassInvalidResponse, Message: "malformed body"}
		be := BackendFunc(func(ctx context.Context, b *Batch, out []Response) error {
			calls.Add(1)
			return garbled
		})
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
		_, err := b.Do(context.Background(), req("g", PriorityNormal))
		if !errors.Is(err, garbled) || calls.Load() != 2 {
			t.Fatalf("Do = %v after %d calls; want the invalid response after one retry (2 calls)", err, calls.Load())
		}
	})
}

// TestFlushRacesFallback flushes calls over and over while they fail on
// the primary and move to the backup's lane: a flush (or a cancel's
// forget) sent to the primary's lane can arrive after its call is queued
// in the backup's, whose owner then writes the call's heapIdx. Under the
// race detector, a lane that read heapIdx on c.lane alone raced here on
// the first run (before lane.holds). Every call still ends once: served
// by the backup, or cancelled.
func TestFlushRacesFallback(t *testing.T) {
	primary := &fakeBackend{fail: func(*Batch, []Response) error {
		return &UpstreamError{Class: ClassServer, StatusCode: 503, Message: "down"}
	}}
	b, err := New(
		WithBackend(BackendConfig{Name: "primary", Backend: primary, MaxConcurrency: 4,
			Retry: RetryPolicy{MaxRetries: -1}, Breaker: BreakerConfig{Consecutive: 1 << 30}}),
		WithBackend(BackendConfig{Name: "backup", Backend: &fakeBackend{latency: 200 * time.Microsecond}, MaxConcurrency: 4}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "primary", Fallbacks: []Target{{Backend: "backup"}},
			Batch: BatchConfig{MaxBatchSize: 4, MinBatchSize: 1, Window: 50 * time.Microsecond}}),
		WithQueueCapacity(4096),
	)
	if err != nil {
		t.Fatal(err)
	}
	noWait, cancel := context.WithCancel(context.Background())
	cancel() // FlushCalls asks for the flush and returns
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 150 {
				c, err := b.Submit(context.Background(), req(fmt.Sprint(g, "-", i), Priority(i%5)))
				if err != nil {
					t.Errorf("Submit: %v", err)
					return
				}
				cancelled := false
				for k := 0; k < 20 && !isDone(c); k++ {
					_ = b.FlushCalls(noWait, c)
					if i%4 == 0 && k == 3 {
						c.Cancel()
						cancelled = true
					}
					runtime.Gosched()
				}
				<-c.Done()
				r := c.Result()
				served := r.Err == nil && r.Backend == "backup"
				if !served && (!cancelled || !errors.Is(r.Err, ErrCanceled)) {
					t.Errorf("call %d-%d: %+v, want served by the backup or (cancelled: %v) ErrCanceled", g, i, r, cancelled)
				}
			}
		})
	}
	wg.Wait()
	ctx, cancelShutdown := context.WithTimeout(context.Background(), time.Minute)
	defer cancelShutdown()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
