package batcher

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

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
