package batcher

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The dispatch concerns wrap the configured Backend, outermost first:
//
//	breakerVerdict{metricsBackend{attemptTimeout{recoverBackend{streamBackend{Backend}}}}}
//
// streamBackend turns a streamed request's batch into the backend's Stream
// call (stream.go).
// recoverBackend is innermost, so that a panic becomes an error every other
// layer sees. attemptTimeout bounds the backend call itself and calls the
// end of its own deadline a timeout (not the batch's cancellation).
// metricsBackend sits outside the timeout, so that it times the whole
// attempt and counts the error the timeout translated. breakerVerdict is
// outermost: it judges the final error, and calls an error that came after
// every caller had stopped waiting (the batch context cancelled) "unused",
// since it says nothing of the backend's health. Rate limits and retries
// are not layers here: the permit was granted before the call (grant.go),
// and a retry puts a request back into its lane, possibly into another
// batch (retry.go).
func decorate(impl Backend, s *backendState) Backend {
	return breakerVerdict{metricsBackend{attemptTimeout{recoverBackend{streamBackend{impl}}, s.cfg.AttemptTimeout, s.cfg.Retry.MaxRetries + 1, s.cfg.StreamIdleTimeout}, s}}
}

// recoverBackend turns a backend's panic into an error, so that one bad
// backend cannot take the service down.
type recoverBackend struct{ next Backend }

func (d recoverBackend) Dispatch(ctx context.Context, b *Batch, out []Response) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &UpstreamError{Class: ClassUnknown, Message: "backend failed", Err: fmt.Errorf("backend panic: %v", p)}
		}
	}()
	return d.next.Dispatch(ctx, b, out)
}

// attemptTimeout bounds one upstream call: by the configured timeout, or,
// when none is, by an even share of what is left of the batch's deadline
// over the attempts the retry policy allows, within a cap per operation. It
// needs a context of its own only when its timeout ends before the last of
// the batch's deadlines.
type attemptTimeout struct {
	next     Backend
	timeout  time.Duration // 0: automatic
	attempts int           // the retry policy's attempts per request
	idle     time.Duration // a streamed answer's longest silence after its first delta
}

// timeoutFor returns the attempt's timeout for b at now.
func (d attemptTimeout) timeoutFor(b *Batch, now time.Time) time.Duration {
	if d.timeout > 0 {
		return d.timeout
	}
	limit := DefaultAttemptTimeout
	if b.Op == OpEmbedding {
		limit = DefaultEmbeddingAttemptTimeout
	}
	share := b.deadline.Sub(now) / time.Duration(max(d.attempts, 1))
	return min(limit, max(share, minAttemptTimeout))
}

func (d attemptTimeout) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	if b.stream != nil {
		return d.dispatchStream(ctx, b, out)
	}
	now := time.Now()
	timeout := d.timeoutFor(b, now)
	if !now.Add(timeout).Before(b.deadline) {
		return d.next.Dispatch(ctx, b, out)
	}
	if rc, ok := ctx.(*runCtx); ok {
		// The batch's own context takes the deadline: a batch makes one
		// attempt, so its context ends with it, and nothing is allocated.
		rc.expireAfter(timeout)
		err := d.next.Dispatch(ctx, b, out)
		if rc.stopExpiry() && err != nil {
			err = attemptTimedOut(timeout, err)
		}
		return err
	}
	actx, cancel := context.WithTimeoutCause(ctx, timeout, errAttemptTimeout)
	defer cancel()
	err := d.next.Dispatch(actx, b, out)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) {
		err = attemptTimedOut(timeout, err)
	}
	return err
}

// attemptTimedOut is the error of an attempt that outlived its timeout. Its
// message is the cause alone: the server prefixes "upstream timed out".
func attemptTimedOut(timeout time.Duration, err error) error {
	return &UpstreamError{Class: ClassTimeout, Message: "no answer within the attempt timeout of " + timeout.Round(time.Millisecond).String(), Err: err}
}

// metricsBackend counts calls and the requests they carry.
type metricsBackend struct {
	next Backend
	s    *backendState
}

func (d metricsBackend) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	n := len(b.Requests)
	d.s.stats.calls.Add(1)
	d.s.stats.items.Add(int64(n))
	d.s.retry.sent(time.Now(), n)
	return d.next.Dispatch(ctx, b, out)
}

// breakerVerdict tells the breaker how the call went.
type breakerVerdict struct{ next Backend }

func (d breakerVerdict) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	err := d.next.Dispatch(ctx, b, out)
	if v := b.verdict; v != nil {
		b.verdict = nil
		if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			v(errUnused) // nobody awaited the answer
		} else {
			v(err)
		}
	}
	return err
}
