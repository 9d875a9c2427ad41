package batcher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A request's RetryOverride replaces its backend's retry count and first
// backoff, and leaves other requests on the backend's policy.
func TestRetryOverride(t *testing.T) {
	for _, tc := range []struct {
		name     string
		override *RetryOverride
		attempts int
	}{
		{"backend policy", nil, 4},
		{"no retries", &RetryOverride{MaxRetries: 0}, 1},
		{"one retry with a long first backoff", &RetryOverride{MaxRetries: 1, InitialBackoff: 30 * time.Second}, 2},
		{"the policy's retries with a long first backoff", &RetryOverride{MaxRetries: PolicyMaxRetries, InitialBackoff: 30 * time.Second}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				be := &fakeBackend{fail: func(b *Batch, out []Response) error {
					return &UpstreamError{Class: ClassServer, StatusCode: 503, Message: "down"}
				}}
				log := &dispatchLog{backend: be}
				// The deadline leaves room for every retry however the
				// jitter falls: three backoffs of up to 30 s each would not
				// always fit the default minute.
				b := newTest(t, log, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1},
					withBreaker("be", BreakerConfig{Consecutive: -1, MinCalls: 1000}), WithQueueTimeout(time.Hour))
				r := req("a", PriorityNormal)
				r.Retry = tc.override
				var delays []time.Duration
				r.Sink = sinkFunc(func(ev *Event) {
					if ev.Kind == EventRetrying {
						delays = append(delays, ev.Delay)
					}
				})
				if _, err := b.Do(context.Background(), r); ClassOf(err) != ClassServer {
					t.Fatalf("Do = %v, want the server error", err)
				}
				if n := len(log.at); n != tc.attempts {
					t.Fatalf("%d attempts, want %d", n, tc.attempts)
				}
				if o := tc.override; o != nil && o.InitialBackoff > 0 {
					for _, d := range delays {
						if d > o.InitialBackoff {
							t.Errorf("first retry waited %v, want within [0, %v]", d, o.InitialBackoff)
						}
					}
				}
			})
		})
	}
}

// A RetryOverride's Factor replaces the backend's (0 keeps it), and Submit
// refuses one outside 1 to MaxBackoffFactor naming the field.
func TestRetryOverrideFactor(t *testing.T) {
	p := RetryPolicy{MaxRetries: 3, InitialBackoff: time.Second, Factor: 2, MaxBackoff: time.Minute}
	for _, tc := range []struct {
		factor, want float64
	}{{0, 2}, {1, 1}, {3.5, 3.5}} {
		r := &Request{Retry: &RetryOverride{MaxRetries: PolicyMaxRetries, Factor: tc.factor}}
		if got := r.retryPolicy(&p); got.Factor != tc.want || got.MaxRetries != 3 {
			t.Errorf("factor %v: policy %+v, want factor %v and the backend's 3 retries", tc.factor, got, tc.want)
		}
	}
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
	for _, f := range []float64{0.5, -1, 11} {
		r := req("a", PriorityNormal)
		r.Retry = &RetryOverride{MaxRetries: PolicyMaxRetries, Factor: f}
		if _, err := b.Submit(context.Background(), r); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "retry.factor") {
			t.Errorf("factor %v: Submit = %v, want ErrInvalid naming retry.factor", f, err)
		}
	}
}

// A retry does not start with less than the least attempt time left before
// the request's deadline: an upstream that answers after the deadline sees
// one call, not a second one cut short (issue: a 2s deadline saw a second
// call 0.43s before it).
func TestNoRetryWithoutTimeForAnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &fakeBackend{hold: make(chan struct{})} // answers only when the attempt's timeout ends it
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		r := req("slow", PriorityHigh)
		// The first attempt gets the least attempt time (its share of 2s
		// over 4 attempts is less) and times out; the retry's backoff
		// (under DefaultInitialBackoff) leaves the second less than that.
		r.Timeout = 2 * minAttemptTimeout
		c := submit(t, b, r)
		<-c.Done()
		res := c.Result()
		if res.Err == nil {
			t.Fatal("an upstream that never answers succeeded")
		}
		if n := be.calls.Load(); n != 1 || res.Attempts != 1 {
			t.Errorf("upstream calls %d, attempts %d (err %v), want 1: the retry would have had under %v", n, res.Attempts, res.Err, minAttemptTimeout)
		}
		close(be.hold)
	})
}

// With time for another attempt after the backoff, the retry happens.
func TestRetryWithTimeForAnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := failsFirst()
		b := newTest(t, be, 1, BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
		r := req("ok", PriorityHigh)
		r.Timeout = DefaultInitialBackoff + minAttemptTimeout + 100*time.Millisecond
		c := submit(t, b, r)
		<-c.Done()
		if res := c.Result(); res.Err != nil || res.Attempts != 2 {
			t.Errorf("result %v after %d attempts, want success on the second", res.Err, res.Attempts)
		}
	})
}
