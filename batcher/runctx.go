package batcher

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// runCtx is a batch's context: cancelled when none of its calls awaits the
// answer any more (Err: context.Canceled), or when the attempt's timeout
// passes (context.DeadlineExceeded). It is pooled with its run, and makes
// its Done channel only when someone asks for it, so that a backend that
// never looks costs nothing. It implements AfterFunc, so that contexts
// derived from it need no goroutine to follow it; it calls them
// synchronously when cancelled. One that was ever given an AfterFunc, or
// asked for its Done channel, is not reused: a derived context may outlive
// the run. (A child of a context that wraps it, such as the span's
// context.WithValue, is followed by a goroutine of the context package
// that calls Done, and Err once Done closes, however late: a reset would
// make that Err nil, which the context package panics on.)
type runCtx struct {
	mu       sync.Mutex
	done     chan struct{}
	err      error
	deadline time.Time
	after    []*runAfter
	used     bool        // AfterFunc or Done was called: not reusable
	expiry   *time.Timer // the attempt timeout; made once
	// armed: the expiry timer bounds the current attempt; it is cleared
	// when the attempt ends, so that a firing that comes late ends
	// nothing. gen counts the arms, so that a firing of an earlier one is
	// told apart.
	armed bool
	gen   uint64
	// A streamed attempt's timeouts (expireStream): the timer bounds the
	// wait for the first delta of stream, then each silence after it by
	// idle. cause is why the timer ended the context (errAttemptTimeout,
	// errStreamIdle), nil if it did not.
	stream *streamState
	idle   time.Duration
	cause  error
}

type runAfter struct {
	f       func()
	stopped bool
}

func newRunCtx() *runCtx {
	c := new(runCtx)
	c.expiry = time.AfterFunc(math.MaxInt64, c.expire)
	c.expiry.Stop()
	return c
}

func (c *runCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, !c.deadline.IsZero()
}

func (c *runCtx) Value(any) any { return nil }

func (c *runCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Whoever holds the channel may call Err once it closes, however late
	// (the context package's goroutine for a child of a wrapped runCtx
	// does): a context whose Done was handed out is never reset for reuse.
	c.used = true
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *runCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc runs f once the context ends (context.AfterFunc's contract,
// which the context package uses for derived contexts).
func (c *runCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used = true
	a := &runAfter{f: f}
	if c.err != nil {
		go f() // already ended: as context.AfterFunc does
		return func() bool { return false }
	}
	c.after = append(c.after, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if a.stopped || c.err != nil {
			return false
		}
		a.stopped = true
		return true
	}
}

// expireAfter makes the context end with DeadlineExceeded after d.
func (c *runCtx) expireAfter(d time.Duration) {
	c.mu.Lock()
	c.deadline = time.Now().Add(d)
	c.armLocked(nil, 0)
	c.expiry.Reset(d)
	c.mu.Unlock()
}

// expireStream makes the context end with DeadlineExceeded when s has
// had no delta within timeout, or, after its first, none for idle (the
// first delta calls streamStarted). It sets no deadline: the timeout
// bounds the wait for the first delta, not the answer.
func (c *runCtx) expireStream(timeout time.Duration, s *streamState, idle time.Duration) {
	c.mu.Lock()
	c.armLocked(s, idle)
	c.expiry.Reset(timeout)
	c.mu.Unlock()
}

func (c *runCtx) armLocked(s *streamState, idle time.Duration) {
	c.armed, c.stream, c.idle, c.cause = true, s, idle, nil
	c.gen++
}

// streamStarted re-arms a streamed attempt's timer for the idle timeout,
// at its first delta.
func (c *runCtx) streamStarted() {
	c.mu.Lock()
	if c.armed && c.stream != nil {
		c.expiry.Reset(c.idle)
	}
	c.mu.Unlock()
}

// expire is the timer's: it ends the context, unless the attempt ended
// meanwhile or its stream had a delta within the idle timeout, in which
// case it waits for the rest.
func (c *runCtx) expire() {
	c.mu.Lock()
	s, idle, gen := c.stream, c.idle, c.gen
	c.mu.Unlock()
	var cause error
	var left time.Duration
	if s != nil { // s's lock is never taken with c's
		s.mu.Lock()
		started, last := s.started, s.lastAt
		s.mu.Unlock()
		if !started {
			cause = errAttemptTimeout
		} else if left = idle - time.Since(last); left <= 0 {
			cause = errStreamIdle
		}
	}
	c.mu.Lock()
	switch {
	case !c.armed || c.gen != gen:
		c.mu.Unlock()
	case left > 0:
		c.expiry.Reset(left)
		c.mu.Unlock()
	default:
		c.armed = false
		if c.err == nil { // not cancelled first
			c.cause = cause
		}
		c.endAndUnlock(context.DeadlineExceeded)
	}
}

// stopExpiry stops the attempt timeout and reports whether it had fired.
func (c *runCtx) stopExpiry() bool {
	c.expiry.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.stream = false, nil
	return errors.Is(c.err, context.DeadlineExceeded)
}

// stopStream stops a streamed attempt's timer and returns why it ended
// the context (errAttemptTimeout, errStreamIdle), or nil if it did not.
func (c *runCtx) stopStream() error {
	c.expiry.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.stream = false, nil
	return c.cause
}

func (c *runCtx) cancel() { c.end(context.Canceled) }

func (c *runCtx) end(err error) {
	c.mu.Lock()
	c.endAndUnlock(err)
}

// endAndUnlock ends the context with err, unless it has ended, and
// releases c.mu, which the caller holds.
func (c *runCtx) endAndUnlock(err error) {
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	after := c.after
	c.after = nil
	c.mu.Unlock()
	// Run synchronously, not in goroutines of their own: the functions are
	// the context package's (cancelling a derived context, which takes no
	// lock of ours).
	for _, a := range after {
		c.mu.Lock()
		stopped := a.stopped
		a.stopped = true
		c.mu.Unlock()
		if !stopped {
			a.f()
		}
	}
}

// reset readies the context for the next run and reports true, or reports
// false, leaving it as it is, when someone may still hold on to it.
func (c *runCtx) reset() bool {
	c.expiry.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.stream, c.cause = false, nil, nil
	if c.used {
		return false
	}
	c.done, c.err, c.after, c.deadline = nil, nil, nil, time.Time{}
	return true
}

// deadlineWatch ends a dispatched batch's calls as their deadlines pass. Its
// timer is made once per pooled run and reset for each batch.
type deadlineWatch struct {
	mu      sync.Mutex // held while fire looks at calls, and by start and stop
	calls   []*Call
	timer   *time.Timer
	stopped bool
}

func (w *deadlineWatch) start(calls []*Call, now time.Time) {
	w.mu.Lock()
	w.calls, w.stopped = calls, false
	w.timer.Reset(w.nextLocked(now).Sub(now))
	w.mu.Unlock()
}

func (w *deadlineWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.calls = nil
	w.mu.Unlock()
}

// nextLocked returns the earliest deadline among live calls, or a time far
// ahead.
func (w *deadlineWatch) nextLocked(now time.Time) time.Time {
	next := now.Add(time.Hour)
	if len(w.calls) == 0 {
		return next
	}
	k := w.calls[0].b.clock
	nextM, found := k.monoOf(next), false
	for _, c := range w.calls {
		if c.pending() && c.deadline < nextM {
			nextM, found = c.deadline, true
		}
	}
	if !found {
		return next
	}
	return k.time(nextM)
}

func (w *deadlineWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	var nowM mono
	if len(w.calls) > 0 {
		nowM = w.calls[0].b.clock.monoOf(now)
	}
	for _, c := range w.calls {
		if c.pending() && c.deadline <= nowM {
			c.finish(Result{Err: ErrDeadline}, now)
		}
	}
	w.timer.Reset(w.nextLocked(now).Sub(now))
}
