package batcher

import (
	"context"
	"fmt"
	"sync"
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

// TestBucketChargesOveruse: a call that spent more than its reservation
// (a reply longer than its estimate) is charged the rest when it
// settles, into debt, and a later settlement of the same reservation
// counts from there.
func TestBucketChargesOveruse(t *testing.T) {
	now := time.Now()
	b := newBucket(60, 10, true) // 1 a second, burst 10
	r := b.take(now, 3)
	b.refund(now, r, 8)
	if got := b.tokensAt(now); got != 2 {
		t.Fatalf("after reserving 3 and using 8 of a full 10: %v tokens, want 2", got)
	}
	b.refund(now, r, 8) // settled already: nothing more
	if got := b.tokensAt(now); got != 2 {
		t.Fatalf("after settling the same use twice: %v tokens, want 2", got)
	}
	r = b.take(now, 1)
	b.refund(now, r, 20) // past what is left: into debt
	if got := b.tokensAt(now); got > -17.9 || got < -18.1 {
		t.Fatalf("after using 20 of a reservation of 1 with 2 left: %v tokens, want about -18", got)
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

// TestReservationChargedForOveruse: a batch whose replies used more
// tokens than it reserved (a prompt estimated low) is charged the rest,
// so that the TPM budget counts what the upstream counts.
func TestReservationChargedForOveruse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, reporting(Usage{PromptTokens: 500, CompletionTokens: 100}), 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}, withLimits("be", 0, 6000))
		bs := b.backends.Load().byName["be"]
		tokens := func() (n float64) {
			bs.query(func() { n = bs.tpm.tokensAt(time.Now()) })
			return n
		}
		before := tokens()
		r := req("long", PriorityNormal)
		r.Params.MaxTokens = 40 // reserved 2+1+40 = 43, used 600
		wantOKDo(t, b, r)
		if got := tokens(); got != before-600 {
			t.Fatalf("token bucket holds %v, want %v: the batch was not charged what it used past its reservation", got, before-600)
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
