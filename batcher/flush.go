package batcher

import (
	"context"
	"sync/atomic"
)

// Flush sends every lane's queued requests now, without waiting out their
// windows, and waits until they have been sent (handed to their backend,
// still within its concurrency and rate limits) or have ended, or until
// ctx ends. Requests admitted after Flush began are not waited for. It
// returns ErrCanceled or ErrDeadline when ctx ended first; the flushed
// requests are still sent as soon as capacity allows.
func (b *Batcher) Flush(ctx context.Context) error {
	var waits []*flushWait
	b.eachLane(func(l *lane) {
		fw := newFlushWait(ctx, nil)
		waits = append(waits, fw)
		l.flush(fw)
	})
	return waitFlushed(ctx, waits)
}

// FlushCalls is Flush for the given calls only: each of them still queued
// goes out in its lane's next batch, ahead of everything else queued there,
// and the batch fills with other queued requests as usual, so that other
// callers' batches do not shrink. Calls in flight, waiting out a retry
// backoff or ended are not waited for. A server flushes one stream's
// requests this way.
//
// The flush is asked for before FlushCalls waits: with a ctx that is
// already done it returns at once, and the calls still leave.
func (b *Batcher) FlushCalls(ctx context.Context, calls ...*Call) error {
	first, firstCalls, others := callsByLane(calls)
	if first == nil {
		return nil
	}
	waits := make([]*flushWait, 0, 1+len(others))
	fw := newFlushWait(ctx, firstCalls)
	waits = append(waits, fw)
	first.flush(fw)
	for l, cs := range others {
		fw := newFlushWait(ctx, cs)
		waits = append(waits, fw)
		l.flush(fw)
	}
	return waitFlushed(ctx, waits)
}

// FlushCallsThen is FlushCalls with a context that is already done: it
// asks for the flush and returns. A lane reads the calls until it has
// handled the flush; then runs once no lane will (on a lane's goroutine,
// or before FlushCallsThen returns when none of the calls is queued), and
// must not block. A caller that pools its Calls (CallHolder) holds those
// it flushes until then.
//
// then always runs, also when a lane exits around the flush: a lane
// closes (lane.close, evictIdleLocked) only with an empty inbox, deciding
// under inMu, the lock send takes. So the flush's message either reaches
// the inbox of a lane that will read it before it can close, or finds the
// lane closed and is finished at once (lane.flush).
func (b *Batcher) FlushCallsThen(then func(), calls ...*Call) {
	first, firstCalls, others := callsByLane(calls)
	if first == nil {
		then()
		return
	}
	var left atomic.Int32
	left.Store(int32(1 + len(others)))
	each := func() {
		if left.Add(-1) == 0 {
			then()
		}
	}
	flush := func(l *lane, cs []*Call) {
		fw := newFlushWait(noWait, cs)
		fw.then = each
		l.flush(fw)
	}
	flush(first, firstCalls)
	for l, cs := range others {
		flush(l, cs)
	}
}

// noWait is a context that is already done: a flush nobody waits for.
var noWait = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// callsByLane sorts the queued calls of calls by lane: those of the first
// lane met (nil: none is queued), and those of any other lane by lane.
// Most flushes name the calls of one lane (a stream's requests for one
// model, flushed as the caller half-closes), which then need no map.
func callsByLane(calls []*Call) (first *lane, firstCalls []*Call, others map[*lane][]*Call) {
	for _, c := range calls {
		if c == nil || !c.queued.Load() {
			continue
		}
		switch l := c.lane.Load(); {
		case l == nil:
		case first == nil || l == first:
			first, firstCalls = l, append(firstCalls, c)
		default:
			if others == nil {
				others = make(map[*lane][]*Call)
			}
			others[l] = append(others[l], c)
		}
	}
	return first, firstCalls, others
}

// newFlushWait returns the flush of calls (nil: every queued call) for a
// waiter whose context is ctx. When ctx is already done nobody will wait:
// the flush moves its calls and is told of none of them leaving, so that
// a caller flushing again and again (a stream's Flush messages, which
// give their window token back at once) leaves no wait behind per queued
// call.
func newFlushWait(ctx context.Context, calls []*Call) *flushWait {
	fw := &flushWait{calls: calls, done: make(chan struct{}), unwaited: ctx.Err() != nil}
	fw.left.Store(1) // the lane's message holds one until it is handled
	return fw
}

func waitFlushed(ctx context.Context, waits []*flushWait) error {
	for _, fw := range waits {
		select {
		case <-fw.done:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
	return nil
}
