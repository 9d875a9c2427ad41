package batcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestBucketRefund(t *testing.T) {
	// rate.Limiter has no partial refund: what a permit gives back after
	// its reservation acted goes to credit, capped at the burst.
	now := time.Now()
	b := newBucket(60, 10, true) // 1 a second, burst 10
	r := b.take(now, 10)
	if got := b.tokensAt(now); got != 0 {
		t.Fatalf("after taking the burst: %v tokens", got)
	}
	b.refund(now, r, 6)
	if got := b.tokensAt(now); got != 4 {
		t.Fatalf("after using 6 of 10: %v tokens, want 4", got)
	}
	b.refund(now, &reservation{taken: 100, at: now}, 0)
	if got := b.tokensAt(now.Add(time.Millisecond)); got != 10 {
		t.Fatalf("refunds past the burst: %v tokens, want the burst 10", got)
	}
	b.take(now, 25) // a charge past the burst goes into debt
	if got := b.tokensAt(now.Add(time.Millisecond)); got > -14.9 || got < -15.1 {
		t.Fatalf("after charging 25: %v tokens, want about -15", got)
	}
	// A reservation given back before it acts is cancelled, as
	// rate.Reservation.CancelAt documents.
	later := now.Add(time.Minute) // the bucket is full again
	r = b.take(later, 3)
	b.refund(later, r, 0)
	if got := b.tokensAt(later); got != 10 {
		t.Fatalf("after cancelling an unused reservation: %v tokens, want 10", got)
	}
}

// dispatchLog records each dispatch's start and cost.
type dispatchLog struct {
	mu      sync.Mutex
	at      []time.Time
	tokens  []int
	reqs    []int
	backend Backend
	fanOut  bool
}

// Dispatch records the call and reports a realistic usage: the prompt plus
// half of max_tokens.
func (d *dispatchLog) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	start := time.Now()
	err := d.backend.Dispatch(ctx, b, out)
	tok := 0
	for i, r := range b.Requests {
		if out[i].Err == nil && err == nil {
			out[i].Usage = Usage{PromptTokens: int32(r.Input.Size()/4 + 1), CompletionTokens: b.MaxTokens / 2}
			tok += int(out[i].Usage.Total())
		}
	}
	d.mu.Lock()
	d.at = append(d.at, start)
	d.tokens = append(d.tokens, tok)
	d.reqs = append(d.reqs, d.UpstreamCalls(b.Route, b.Op, len(b.Requests)))
	d.mu.Unlock()
	return err
}

func (d *dispatchLog) UpstreamCalls(_ string, _ Operation, n int) int {
	if d.fanOut {
		return n
	}
	return 1
}

// maxInWindow returns the most that vals spent within any window of w.
func (d *dispatchLog) maxInWindow(w time.Duration, vals []int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	best := 0
	for i := range d.at {
		sum := 0
		for j := i; j < len(d.at) && d.at[j].Sub(d.at[i]) < w; j++ {
			sum += vals[j]
		}
		best = max(best, sum)
	}
	return best
}

func TestRPMAndTPMNeverExceeded(t *testing.T) {
	for _, fanOut := range []bool{false, true} {
		t.Run(fmt.Sprint("fanout=", fanOut), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const rpm, tpm = 120, 60000
				log := &dispatchLog{backend: &fakeBackend{latency: 50 * time.Millisecond}, fanOut: fanOut}
				b := newTest(t, log, 8, BatchConfig{MaxBatchSize: 5, Window: 10 * time.Millisecond},
					withLimits("be", rpm, tpm), WithQueueCapacity(10000), WithQueueTimeout(time.Hour))
				var wg sync.WaitGroup
				for g := range 64 {
					wg.Go(func() {
						for i := range 4 {
							r := req(fmt.Sprintf("%d-%d", g, i), PriorityNormal)
							r.Params.MaxTokens = int32(10 + 50*((g+i)%8)) // mixed max_tokens
							wantOKDo(t, b, r)
						}
					})
				}
				wg.Wait()
				// A token bucket lets through its burst plus its rate over any
				// window; a batch larger than the burst may overshoot by itself.
				// Tokens count what the upstream reported using.
				maxBatchTokens := 5 * (2 + 10 + 50*7)
				for _, w := range []time.Duration{time.Second, 10 * time.Second, time.Minute} {
					if got, limit := log.maxInWindow(w, log.reqs), rpm/60+int(rpm*w/time.Minute)+4; got > limit {
						t.Errorf("%d requests within %v, limit %d", got, w, limit)
					}
					if got, limit := log.maxInWindow(w, log.tokens), tpm/60+int(tpm*w/time.Minute)+maxBatchTokens; got > limit {
						t.Errorf("%d tokens within %v, limit %d", got, w, limit)
					}
				}
				if s := b.Stats()[0]; s.Waits["rpm"]+s.Waits["tpm"] == 0 {
					t.Errorf("no batch waited for the rate budget: the test did not load it (%+v)", s.Waits)
				}
			})
		})
	}
}

func TestReservationSettledAgainstUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{} // reports 2 tokens of usage per request
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 2, MinBatchSize: 2}, withLimits("be", 0, 6000))
		bs := b.backends.Load().byName["be"]
		tokens := func() (n float64) {
			bs.query(func() { n = bs.tpm.tokensAt(time.Now()) }) // after the release, sent before the results
			return n
		}
		before := tokens()
		r1, r2 := req("a", PriorityNormal), req("b", PriorityNormal)
		r1.Params.MaxTokens, r2.Params.MaxTokens = 40, 40
		c1, c2 := submit(t, b, r1), submit(t, b, r2)
		<-c1.Done()
		<-c2.Done()
		// Reserved (2+1+40)×2 = 86, used 4: 82 refunded.
		if got := tokens(); got != before-4 {
			t.Fatalf("token bucket holds %v, want %v: the reservation was not settled against usage", got, before-4)
		}
	})
}

func TestAdaptiveDecreaseAndRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		var mu sync.Mutex
		be := &fakeBackend{fail: func(b *Batch, out []Response) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return &UpstreamError{Class: ClassRateLimit, StatusCode: 429, Message: "slow down",
					RateLimit: &RateLimitInfo{RetryAfter: 3 * time.Second, RemainingRequests: -1, RemainingTokens: -1}}
			}
			return nil
		}}
		log := &dispatchLog{backend: be}
		b := newTest(t, log, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
			withLimits("be", 600, 0), withConcurrencyFloor("be", 1))
		start := time.Now()
		wantOKDo(t, b, req("first", PriorityNormal)) // 429, then retried after Retry-After
		s := b.Stats()[0]
		if s.RPM != 300 || s.Limit != 2 || s.RateLimited != 1 {
			t.Fatalf("after a 429: rpm %v, concurrency %d, 429s %d; want 300, 2, 1", s.RPM, s.Limit, s.RateLimited)
		}
		if got := log.at[1].Sub(start); got < 3*time.Second {
			t.Fatalf("retried after %v, before the upstream's Retry-After of 3s", got)
		}
		for i := range 2 * adaptSuccesses {
			wantOKDo(t, b, req(fmt.Sprint(i), PriorityNormal))
		}
		s = b.Stats()[0]
		if s.RPM != 420 || s.Limit != 4 {
			t.Fatalf("after %d successes: rpm %v, concurrency %d; want 420 (two steps of 60) and 4", 2*adaptSuccesses+1, s.RPM, s.Limit)
		}
	})
}

func TestRateLimitHeadersSlowTheDispatcher(t *testing.T) {
	exhausted := BackendFunc(func(_ context.Context, b *Batch, out []Response) error {
		b.RateLimit = &RateLimitInfo{RemainingRequests: 0, ResetRequests: 2 * time.Second, RemainingTokens: -1}
		for i := range out {
			out[i].Text = "ok"
		}
		return nil
	})
	t.Run("pause without a bucket", func(t *testing.T) {
		// No limit header: no rate can be learned. The reset is the time
		// until the budget is full again, not until the next request may
		// go, so the pause is a short look-again, never the whole reset.
		synctest.Test(t, func(t *testing.T) {
			log := &dispatchLog{backend: exhausted}
			b := newTest(t, log, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
			wantOKDo(t, b, req("a", PriorityNormal))
			wantOKDo(t, b, req("b", PriorityNormal))
			if gap := log.at[1].Sub(log.at[0]); gap != unknownLimitPause {
				t.Fatalf("second call %v after the first, want a pause of %v (upstream: none left, full again in 2s, no limit given)", gap, unknownLimitPause)
			}
		})
	})
	t.Run("learn the rate", func(t *testing.T) {
		// limit 600, none left, full again in 60s: 10 a second. The next
		// call waits 100 ms for its one request, not the 60 s reset.
		learned := BackendFunc(func(_ context.Context, b *Batch, out []Response) error {
			b.RateLimit = &RateLimitInfo{LimitRequests: 600, RemainingRequests: 0, ResetRequests: time.Minute, RemainingTokens: -1}
			for i := range out {
				out[i].Text = "ok"
			}
			return nil
		})
		synctest.Test(t, func(t *testing.T) {
			log := &dispatchLog{backend: learned}
			b := newTest(t, log, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
			wantOKDo(t, b, req("a", PriorityNormal))
			wantOKDo(t, b, req("b", PriorityNormal))
			if gap := log.at[1].Sub(log.at[0]); gap != 100*time.Millisecond {
				t.Fatalf("second call %v after the first, want 100ms: one request's refill at the learned 10/s", gap)
			}
			st := b.Stats()[0]
			if st.RPM != 600 || st.RPMBurst != 600 {
				t.Fatalf("learned rpm %v burst %d, want 600 and 600", st.RPM, st.RPMBurst)
			}
		})
	})
	t.Run("drain the bucket", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			log := &dispatchLog{backend: exhausted}
			b := newTest(t, log, 4, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, withLimits("be", 600, 0))
			wantOKDo(t, b, req("a", PriorityNormal)) // leaves 9 of 10 in our bucket; the upstream says 0
			wantOKDo(t, b, req("b", PriorityNormal))
			if gap := log.at[1].Sub(log.at[0]); gap < 100*time.Millisecond {
				t.Fatalf("second call %v after the first: the upstream's remaining 0 did not drain our bucket", gap)
			}
		})
	})
}

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

func TestDedup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 10, MinBatchSize: 1})
		zero, warm, seed := float32(0), float32(0.8), int64(7)
		mk := func(id string, temp *float32, seed *int64) *Request {
			r := req(id, PriorityNormal)
			r.Input.Prompt = "same prompt"
			r.Params.Temperature, r.Params.Seed = temp, seed
			return r
		}
		lead := submit(t, b, mk("lead", &zero, &seed))
		synctest.Wait() // in flight
		same := submit(t, b, mk("same", &zero, &seed))
		hot1, hot2 := submit(t, b, mk("hot1", &warm, &seed)), submit(t, b, mk("hot2", &warm, &seed))
		optIn := mk("opt-in", &warm, nil)
		optIn.Dedup = DedupOn
		optIn2 := mk("opt-in-2", &warm, nil)
		optIn2.Dedup = DedupOn
		o1, o2 := submit(t, b, optIn), submit(t, b, optIn2)
		close(be.hold)
		synctest.Wait()
		for _, c := range []*Call{lead, same, hot1, hot2, o1, o2} {
			wantOK(t, c)
		}
		if !same.Result().Deduplicated || lead.Result().Deduplicated || !o2.Result().Deduplicated {
			t.Fatal("identical deterministic requests were not merged")
		}
		if hot1.Result().Deduplicated || hot2.Result().Deduplicated {
			t.Fatal("temperature > 0 runs were merged")
		}
		var sent []string
		for _, ids := range be.batchIDs() {
			sent = append(sent, ids...)
		}
		slices.Sort(sent)
		if want := []string{"hot1", "hot2", "lead", "opt-in"}; !slices.Equal(sent, want) {
			t.Fatalf("sent upstream %v, want %v", sent, want)
		}
		if hits := b.Stats()[0].DedupHits; hits != 2 {
			t.Fatalf("dedup hits %d, want 2", hits)
		}
	})
}

func TestDedupLeaderCancelledFollowerGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{}
		b := newTest(t, be, 4, BatchConfig{Window: time.Second, MinBatchSize: 5})
		r1, r2 := req("lead", PriorityNormal), req("follow", PriorityNormal)
		r1.Dedup, r2.Dedup = DedupOn, DedupOn
		r1.Input.Prompt, r2.Input.Prompt = "same", "same"
		lead, follow := submit(t, b, r1), submit(t, b, r2)
		lead.Cancel()
		wantErr(t, lead, ErrCanceled)
		time.Sleep(time.Second)
		synctest.Wait()
		wantOK(t, follow)
	})
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		be := BackendFunc(func(ctx context.Context, b *Batch, out []Response) error {
			if calls.Add(1) == 1 {
				<-ctx.Done() // the first attempt hangs
				return ctx.Err()
			}
			for i := range out {
				out[i].Text = "ok"
			}
			return nil
		})
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1}, withBackend("be", func(c *BackendConfig) { c.AttemptTimeout = time.Second }))
		rec := &recorder{}
		r := req("a", PriorityNormal)
		var class ErrorClass
		r.Sink = sinkFunc(func(ev *Event) {
			rec.OnEvent(ev)
			if ev.Kind == EventRetrying {
				class = ev.Class
			}
		})
		res, err := b.Do(context.Background(), r)
		if err != nil || res.Attempts != 2 || class != ClassTimeout {
			t.Fatalf("Do = %+v, %v; retried as %v; want success on the second attempt after a timeout", res, err, class)
		}
	})
}

// An attempt that outlives its timeout, with no retry left, ends with a
// ClassTimeout error whose message names the timeout once.
func TestAttemptTimeoutErrorNamesTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := BackendFunc(func(ctx context.Context, b *Batch, out []Response) error {
			<-ctx.Done()
			return ctx.Err()
		})
		b := newTest(t, be, 1, BatchConfig{MinBatchSize: 1}, withBackend("be", func(c *BackendConfig) {
			c.AttemptTimeout = time.Second
			c.Retry = RetryPolicy{MaxRetries: -1}
		}))
		_, err := b.Do(context.Background(), req("a", PriorityNormal))
		var ue *UpstreamError
		if !errors.As(err, &ue) || ue.Class != ClassTimeout {
			t.Fatalf("Do = %v, want a ClassTimeout UpstreamError", err)
		}
		if want := "no answer within the attempt timeout of 1s"; ue.Message != want {
			t.Fatalf("message %q, want %q", ue.Message, want)
		}
	})
}

// Lanes waiting for a slot when the breaker opens must fail over at once,
// not sit until their deadline.
func TestBreakerOpeningMovesWaitersToFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeBackend{hold: make(chan struct{}), fail: func(*Batch, []Response) error {
			return &UpstreamError{Class: ClassServer, Message: "boom"}
		}}
		b, err := New(
			WithBackend(BackendConfig{Name: "be", Backend: f, MaxConcurrency: 1,
				Breaker: BreakerConfig{Consecutive: 1}, Retry: RetryPolicy{MaxRetries: -1}}),
			WithBackend(BackendConfig{Name: "be2", Backend: &fakeBackend{}}),
			WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Fallbacks: []Target{{Backend: "be2"}}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Shutdown(context.Background()) }()
		a := submit(t, b, req("a", PriorityUrgent))
		synctest.Wait()
		rb := req("b", PriorityUrgent)
		rb.Params.MaxTokens = 7 // another lane, waiting for be's only slot
		rb.Timeout = time.Minute
		cb := submit(t, b, rb)
		synctest.Wait()
		close(f.hold) // a fails: the breaker opens
		<-cb.Done()
		if r := cb.Result(); r.Err != nil || r.Backend != "be2" {
			t.Fatalf("b = %+v; want it served by the fallback", r)
		}
		// a failed with a server error and has no retries: it moves to the
		// fallback too, rather than failing while a healthy target exists.
		if r := a.Result(); r.Err != nil || r.Backend != "be2" {
			t.Fatalf("a = %+v; want it served by the fallback after its server error", r)
		}
	})
}

// A follower whose deadline passes while it joins must not leave a group
// behind with a finished leader: later identical requests would wait on it.
func TestDedupNeverFollowsAnEndedLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, &fakeBackend{}, 4, BatchConfig{MinBatchSize: 1})
		mk := func(id string) *Request {
			r := req(id, PriorityUrgent)
			r.Dedup, r.Input.Prompt = DedupOn, "same"
			return r
		}
		lead := submit(t, b, mk("lead"))
		lead.Cancel()
		// The group may still hold the ended leader if leave has not run;
		// a newcomer must lead a new group, not follow it.
		c := submit(t, b, mk("next"))
		<-c.Done()
		wantOK(t, c)
		// A leader leaves its group after it signals Done: let it.
		synctest.Wait()
		b.dedup.mu.Lock()
		defer b.dedup.mu.Unlock()
		for k, g := range b.dedup.groups {
			if !g.leader.pending() {
				t.Fatalf("group %x left with an ended leader", k.id)
			}
		}
	})
}
