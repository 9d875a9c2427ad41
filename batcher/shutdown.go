package batcher

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// track puts r in b.runs, where Shutdown's abort finds its calls.
func (b *Batcher) track(r *batchRun) {
	r.tracked = true
	b.runsMu.Lock()
	b.runs[r] = struct{}{}
	b.runsMu.Unlock()
}

// untrack takes r out of b.runs, once; only r's own goroutine calls it.
func (b *Batcher) untrack(r *batchRun) {
	if !r.tracked {
		return
	}
	r.tracked = false
	b.runsMu.Lock()
	delete(b.runs, r)
	b.runsMu.Unlock()
}

// shutdownGrace is how long Shutdown waits, once its context has ended and
// every pending request has its result, for dispatches still in flight to
// return. Their contexts are cancelled then, and a Backend must return
// promptly on cancellation (its contract); one that does not is reported
// in Shutdown's error and left running rather than hang the caller.
const shutdownGrace = time.Second

// Shutdown stops admission, sends every partial batch at once and waits for
// every pending request until ctx ends. Requests still pending then end with
// ErrShutdown, and Shutdown returns an error wrapping ctx's. It returns once
// the batcher's goroutines have stopped (see shutdownGrace for a backend
// that ignores its context). Calling it again waits again.
func (b *Batcher) Shutdown(ctx context.Context) error {
	b.shutOnce.Do(func() {
		b.closing.Store(true) // see submit's fence
		close(b.closed)
		if b.pending.Load() == 0 {
			b.drainOnce.Do(func() { close(b.drained) })
		}
		b.eachLane((*lane).nudge)
		go func() {
			// Lane owners leave once they are idle; then nothing hands the
			// workers a batch any more.
			<-b.drainedOrAborted()
			// After an abort laneFor makes no lane; one it was making
			// holds lanesMu and is counted in lanesWG once this passes.
			b.lanesMu.Lock()
			b.lanesMu.Unlock() //nolint:staticcheck // an empty critical section on purpose: a barrier
			b.lanesWG.Wait()
			b.routesMu.Lock() // Reconfigure is refused from now on
			all := b.allBackends
			b.routesMu.Unlock()
			for _, be := range all {
				close(be.work)
			}
			b.workers.Wait()
			// The workers' releases and retries are in the owners'
			// inboxes: each owner applies them, then exits.
			for _, be := range all {
				be.stop()
			}
			b.owners.Wait()
			b.fetches.Wait()
			close(b.stopped)
		}()
	})
	var err error
	select {
	case <-b.drained:
	case <-ctx.Done():
		if n := b.abort(); n > 0 {
			err = fmt.Errorf("batcher: drain ended with %d requests pending, failed with ErrShutdown: %w", n, ctx.Err())
		}
	}
	if ctx.Err() == nil {
		select {
		case <-b.stopped:
			return err
		case <-ctx.Done():
			b.abort()
		}
	}
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case <-b.stopped:
		return err
	case <-grace.C:
		return errors.Join(err, fmt.Errorf("batcher: dispatches still running, a backend ignores its context: %w", ctx.Err()))
	}
}

// drainedOrAborted is closed once nothing is pending or the drain was cut
// short.
func (b *Batcher) drainedOrAborted() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		select {
		case <-b.drained:
		case <-b.abortCh:
		}
		close(ch)
	}()
	return ch
}

// abort ends every pending call with ErrShutdown and reports how many were
// pending. Queued calls are ended by their lanes' owners.
func (b *Batcher) abort() int {
	n := int(b.pending.Load())
	b.abortOnce.Do(func() {
		b.aborted.Store(true) // from now on, whatever moves ends instead
		close(b.abortCh)
	})
	var calls []*Call
	b.runsMu.Lock()
	for r := range b.runs {
		calls = append(calls, r.calls...)
	}
	b.runsMu.Unlock()
	now := time.Now()
	for _, c := range calls {
		c.finish(Result{Err: ErrShutdown}, now)
	}
	// The calls waiting out a retry backoff are their backends' owners':
	// each ends its own, and answers once it has.
	b.routesMu.Lock()
	all := b.allBackends
	b.routesMu.Unlock()
	for _, be := range all {
		done := make(chan struct{})
		be.send(bmsg{kind: bmAbort, done: done})
		<-done
	}
	b.eachLane((*lane).nudge)
	return n
}
