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
}

type runAfter struct {
	f       func()
	stopped bool
}

func newRunCtx() *runCtx {
	c := new(runCtx)
	c.expiry = time.AfterFunc(math.MaxInt64, func() { c.end(context.DeadlineExceeded) })
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
	c.mu.Unlock()
	c.expiry.Reset(d)
}

// stopExpiry stops the attempt timeout and reports whether it had fired.
func (c *runCtx) stopExpiry() bool {
	c.expiry.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Is(c.err, context.DeadlineExceeded)
}

func (c *runCtx) cancel() { c.end(context.Canceled) }

func (c *runCtx) end(err error) {
	c.mu.Lock()
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
	for _, c := range w.calls {
		if c.pending() && c.deadline.Before(next) {
			next = c.deadline
		}
	}
	return next
}

func (w *deadlineWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	for _, c := range w.calls {
		if c.pending() && !c.deadline.After(now) {
			c.finish(Result{Err: ErrDeadline}, now)
		}
	}
	w.timer.Reset(w.nextLocked(now).Sub(now))
}
