package batcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestUrgentStaysFastUnderLowFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &dispatchLog{backend: &fakeBackend{latency: 200 * time.Millisecond}}
		b := newTest(t, log, 4, BatchConfig{MaxBatchSize: 5, Window: 20 * time.Millisecond},
			withLimits("be", 600, 0), WithQueueCapacity(100000), WithQueueTimeout(time.Hour))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var lowMu sync.Mutex
		var lowLat []time.Duration
		for g := range 100 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					wantOKDo(t, b, req(fmt.Sprintf("low-%d-%d", g, i), PriorityLow))
					lowMu.Lock()
					lowLat = append(lowLat, time.Since(start))
					lowMu.Unlock()
				}
			})
		}
		time.Sleep(10 * time.Second) // the flood saturates the budget
		var urgent []time.Duration
		for i := range 20 {
			start := time.Now()
			wantOKDo(t, b, req(fmt.Sprint("urgent-", i), PriorityUrgent))
			urgent = append(urgent, time.Since(start))
			time.Sleep(500 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		slices.Sort(urgent)
		slices.Sort(lowLat)
		p50low := lowLat[len(lowLat)/2]
		if p99 := urgent[len(urgent)-1]; p99 > 500*time.Millisecond || p50low < 4*p99 {
			t.Fatalf("URGENT worst latency %v, LOW median %v: URGENT must stay low while LOW saturates the budget", p99, p50low)
		}
	})
}

func TestRetriesFollowThePolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			return &UpstreamError{Class: ClassServer, StatusCode: 503, Message: "down"}
		}}
		log := &dispatchLog{backend: be}
		b := newTest(t, log, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
			withBreaker("be", BreakerConfig{Consecutive: -1, MinCalls: 1000}))
		rec := &recorder{}
		r := req("a", PriorityNormal)
		var delays []time.Duration
		r.Sink = sinkFunc(func(ev *Event) {
			rec.OnEvent(ev)
			if ev.Kind == EventRetrying {
				delays = append(delays, ev.Delay)
				if ev.Class != ClassServer || ev.Attempt != len(delays) {
					t.Errorf("retrying event %+v", ev)
				}
			}
		})
		_, err := b.Do(context.Background(), r)
		if ClassOf(err) != ClassServer {
			t.Fatalf("Do = %v, want the server error after the retries", err)
		}
		if n := len(log.at); n != 4 {
			t.Fatalf("%d attempts, want 1 + 3 retries", n)
		}
		for i, d := range delays {
			if ceil := time.Second << i; d < 0 || d > ceil {
				t.Errorf("retry %d waited %v, want full jitter within [0, %v]", i, d, ceil)
			}
			if gap := log.at[i+1].Sub(log.at[i]); gap < d {
				t.Errorf("retry %d came %v after its attempt, before its delay %v", i, gap, d)
			}
		}
		want := []EventKind{EventQueued, EventBatched, EventDispatched, EventRetrying, EventBatched, EventDispatched, EventRetrying,
			EventBatched, EventDispatched, EventRetrying, EventBatched, EventDispatched, EventDone}
		if got := rec.of("a"); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
	})
}

type sinkFunc func(*Event)

func (f sinkFunc) OnEvent(ev *Event) { f(ev) }

func TestRetriesStopAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			return &UpstreamError{Class: ClassRateLimit, StatusCode: 429, Message: "busy",
				RateLimit: &RateLimitInfo{RetryAfter: 2 * time.Second, RemainingRequests: -1, RemainingTokens: -1}}
		}}
		log := &dispatchLog{backend: be}
		b := newTest(t, log, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		r := req("a", PriorityNormal)
		r.Timeout = 3500 * time.Millisecond // the second attempt at 2s has the least attempt time
		start := time.Now()
		_, err := b.Do(context.Background(), r)
		if ClassOf(err) != ClassRateLimit || time.Since(start) >= r.Timeout {
			t.Fatalf("Do = %v after %v, want the rate limit error before the deadline", err, time.Since(start))
		}
		if n := len(log.at); n != 2 {
			t.Fatalf("%d attempts, want 2: a third would wait past the deadline", n)
		}
	})
}

func TestNotRetried(t *testing.T) {
	// An invalid response is retried once (TestInvalidResponseRetriedOnce).
	for _, class := range []ErrorClass{ClassAuth, ClassInvalidRequest} {
		t.Run(class.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				be := &fakeBackend{fail: func(b *Batch, out []Response) error {
					return &UpstreamError{Class: class, Message: "no"}
				}}
				b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
				if _, err := b.Do(context.Background(), req("a", PriorityNormal)); ClassOf(err) != class || be.calls.Load() != 1 {
					t.Fatalf("Do = %v after %d calls, want %v after one", err, be.calls.Load(), class)
				}
			})
		})
	}
	t.Run("unknown once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			be := &fakeBackend{fail: func(b *Batch, out []Response) error { return errors.New("???") }}
			b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1})
			if _, err := b.Do(context.Background(), req("a", PriorityNormal)); err == nil || be.calls.Load() != 2 {
				t.Fatalf("Do = %v after %d calls, want an error after two", err, be.calls.Load())
			}
		})
	})
}

func TestPartialFailureRetriesOnlyTheFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var once sync.Once
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			once.Do(func() { out[1] = Response{Err: &UpstreamError{Class: ClassServer, Message: "item failed"}} })
			return nil
		}}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 3, MinBatchSize: 3})
		a, m, z := submit(t, b, req("a", PriorityNormal)), submit(t, b, req("b", PriorityNormal)), submit(t, b, req("c", PriorityNormal))
		synctest.Wait()
		wantOK(t, a)
		wantOK(t, z)
		if isDone(m) {
			t.Fatal("the failed item ended instead of being retried")
		}
		<-m.Done()
		wantOK(t, m)
		if got := be.batchIDs(); len(got) != 2 || !slices.Equal(got[1], []string{"b"}) {
			t.Fatalf("batches %v, want the retry to carry only the failed request", got)
		}
		if r := m.Result(); r.Attempts != 2 {
			t.Fatalf("attempts %d, want 2", r.Attempts)
		}
	})
}

func TestRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			return &UpstreamError{Class: ClassServer, Message: "down"}
		}}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
			withRetry("be", RetryPolicy{BudgetRatio: 0.2, BudgetMin: 2, BudgetWindow: time.Minute}),
			withBreaker("be", BreakerConfig{Consecutive: -1, MinCalls: 1000}))
		var wg sync.WaitGroup
		for i := range 100 { // 300 retries wanted
			wg.Go(func() { _, _ = b.Do(context.Background(), req(fmt.Sprint(i), PriorityNormal)) })
		}
		wg.Wait()
		retries := b.Stats()[0].Retries["server_error"]
		calls := be.calls.Load()
		if limit := max(120, int64(0.2*float64(calls))); retries > limit || retries < limit/2 {
			t.Fatalf("%d retries over %d calls: want the budget (120 a minute, or 20%% of calls) to cap them at %d", retries, calls, limit)
		}
	})
}

func TestBreakerOpensHalfOpensCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing = true
		var mu sync.Mutex
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			mu.Lock()
			defer mu.Unlock()
			if failing {
				return &UpstreamError{Class: ClassServer, Message: "down"}
			}
			return nil
		}}
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
			withRetry("be", RetryPolicy{MaxRetries: -1}),
			withBreaker("be", BreakerConfig{Consecutive: 3, Cooldown: 5 * time.Second}))
		for i := range 3 {
			_, _ = b.Do(context.Background(), req(fmt.Sprint(i), PriorityNormal))
		}
		if s := b.Stats()[0]; s.Breaker != BreakerOpen {
			t.Fatalf("breaker %v after 3 failures, want open", s.Breaker)
		}
		calls := be.calls.Load()
		_, err := b.Do(context.Background(), req("fast", PriorityNormal))
		if !errors.Is(err, ErrNoBackend) || be.calls.Load() != calls {
			t.Fatalf("Do while open = %v, want ErrNoBackend without an upstream call", err)
		}
		time.Sleep(5*time.Second + time.Nanosecond)
		mu.Lock()
		failing = false
		mu.Unlock()
		if s := b.Stats()[0]; s.Breaker != BreakerHalfOpen {
			t.Fatalf("breaker %v after the cooldown, want half_open", s.Breaker)
		}
		wantOKDo(t, b, req("probe", PriorityNormal))
		s := b.Stats()[0]
		if s.Breaker != BreakerClosed || s.BreakerTransitions["open"] != 1 || s.BreakerTransitions["half_open"] != 1 || s.BreakerTransitions["closed"] != 1 {
			t.Fatalf("breaker %v, transitions %v: want open, half-open, closed once each", s.Breaker, s.BreakerTransitions)
		}
	})
}

func TestFallbackWhenBreakerOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &fakeBackend{fail: func(b *Batch, out []Response) error {
			return &UpstreamError{Class: ClassServer, Message: "down"}
		}}
		backup := &fakeBackend{}
		b, err := New(
			WithBackend(BackendConfig{Name: "primary", Backend: primary, Retry: RetryPolicy{MaxRetries: -1}, Breaker: BreakerConfig{Consecutive: 2}}),
			WithBackend(BackendConfig{Name: "backup", Backend: backup}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "primary", Model: "big",
				Fallbacks: []Target{{Backend: "backup", Model: "small"}}, Batch: BatchConfig{MinBatchSize: 1}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		for i := range 2 {
			_, _ = b.Do(context.Background(), req(fmt.Sprint(i), PriorityNormal))
		}
		res, err := b.Do(context.Background(), req("after", PriorityNormal))
		if err != nil || res.Backend != "backup" {
			t.Fatalf("Do = %+v, %v; want the backup to serve it", res, err)
		}
		if n := primary.calls.Load(); n != 2 {
			t.Fatalf("primary saw %d calls, want 2: an open breaker takes none", n)
		}
	})
}

func TestFallbackWhenBudgetCannotMeetDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary, backup := &fakeBackend{}, &fakeBackend{}
		b, err := New(
			WithBackend(BackendConfig{Name: "primary", Backend: primary, RPM: 6}),
			WithBackend(BackendConfig{Name: "backup", Backend: backup}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "primary",
				Fallbacks: []Target{{Backend: "backup"}}, Batch: BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
			WithRoute(Route{Name: "solo", Op: OpCompletion, Backend: "primary", Batch: BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		wantOKDo(t, b, req("spends the bucket", PriorityNormal))
		r := req("hurried", PriorityNormal)
		r.Timeout = time.Second // the bucket refills one request in 10s
		start := time.Now()
		res, err := b.Do(context.Background(), r)
		if err != nil || res.Backend != "backup" || time.Since(start) != 0 {
			t.Fatalf("Do = %+v, %v after %v; want the backup at once", res, err, time.Since(start))
		}
		s := req("no fallback", PriorityNormal)
		s.Route, s.Timeout = "solo", time.Second
		_, err = b.Do(context.Background(), s)
		if !errors.Is(err, ErrBudgetExhausted) || !strings.Contains(err.Error(), "rpm budget") || time.Since(start) != 0 {
			t.Fatalf("Do = %v after %v; want an early rpm budget error", err, time.Since(start))
		}
	})
}
