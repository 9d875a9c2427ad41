package jobs

import (
	"cmp"
	"context"
	"errors"
	"math"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// minWindow is the least a job keeps in flight: a batch's worth.
const minWindow = 8

// limit is how many of the job's tasks may be in flight now.
func (r *run) limit() int {
	return min(r.bound(), r.m.share(), int(math.Ceil(r.win)))
}

// bound is the job's configured bound of tasks in flight.
func (r *run) bound() int {
	return cmp.Or(r.job.Spec.ConcurrentRequests, r.m.cfg.ConcurrentRequests)
}

// observe adapts the window to a request's wait in the core's queue.
func (r *run) observe(queued time.Duration, now time.Time) {
	target := r.m.cfg.QueueTarget
	switch {
	case queued > target:
		if now.Sub(r.lastCut) >= target {
			r.win, r.grown, r.lastCut = max(minWindow, r.win/2), true, now
		}
	case !r.grown:
		r.win++
	default:
		r.win += 1 / r.win
	}
	r.win = min(r.win, float64(max(r.bound(), minWindow)))
}

// admission is what became of a task handed to the core.
type admission uint8

const (
	// admitted: it runs, or ended at once (an invalid request).
	admitted admission = iota
	// held: the job's pacer holds it; later tasks (of another group) may
	// start.
	held
	// refused: the core cannot take it now (queue full, the tenant over a
	// quota, closing), or the run stopped claiming: no task starts until
	// the next round.
	refused
)

// fill tops the job's tasks in flight up to its limit: first those claimed
// earlier that the core could not take or the pacer held, then a new
// claim unless the core refused one.
//
// A task counts as in flight from its claim until its result is committed,
// so that a crash redoes at most the job's limit of tasks.
func (r *run) fill() {
	limit := r.limit()
	if r.up != nil {
		r.dried() // the batch API claims the job's tasks
	}
	if !r.fillBacklog(limit) || r.supply != supplyUnknown {
		return
	}
	// What the backlog still holds, the pacer holds: later tasks (of an
	// undelayed group) are claimed past it, within the limit, which
	// counts the backlog too.
	busy := r.busy() + len(r.backlog)
	n := limit - busy
	// Claim in chunks, not one task at a time.
	if n <= 0 || (busy > 0 && n < max(1, limit/8)) {
		return
	}
	n = min(n, 1024)
	tasks, err := r.m.cfg.Store.Claim(r.work, r.id, r.m.cfg.Owner, n, r.m.cfg.Lease)
	if err != nil {
		if r.work.Err() == nil {
			r.logErr("claiming tasks", err)
		}
		r.dried() // try again at the next poll
		return
	}
	if len(tasks) < n {
		r.dried()
	}
	for i := range tasks {
		switch r.submit(&tasks[i], "") {
		case held:
			r.backlog = append(r.backlog, tasks[i])
		case refused:
			r.backlog = append(r.backlog, tasks[i:]...)
			return
		}
	}
}

// fillBacklog submits the backlog's tasks while the limit allows. Tasks
// the pacer holds stay, in order, while later ones (of another group) may
// start. It reports false when the core refused one.
func (r *run) fillBacklog(limit int) bool {
	if len(r.backlog) == 0 {
		return true
	}
	ok := true
	kept := r.backlog[:0]
	for i := range r.backlog {
		if r.busy() >= limit {
			kept = append(kept, r.backlog[i:]...)
			break
		}
		t := r.backlog[i]
		a := r.submit(&t, t.Model)
		if a == held {
			kept = append(kept, t)
		} else if a == refused {
			kept = append(append(kept, t), r.backlog[i+1:]...)
			ok = false
			break
		}
	}
	clear(r.backlog[len(kept):])
	r.backlog = kept
	return ok
}

// busy is how many of the job's tasks count as in flight: from their claim
// until their result is committed.
func (r *run) busy() int { return len(r.calls) + len(r.pending) + len(r.committing) }

// submit hands a task to the core, on model when it is set. A task that
// does not start (held, refused) stays the caller's, to keep in the
// backlog, its model in t.Model. A task the core rejects as invalid ends
// failed.
func (r *run) submit(t *Task, model string) admission {
	f, req, err := r.request(r.work, t, model)
	if err != nil && r.work.Err() != nil {
		return refused // a judge's runs unread: the run stopped claiming
	}
	if err == nil && r.pace.limited() {
		var wait time.Duration
		f.charged, wait = r.pace.admit(t.Group, req.EstimatedTokens(r.m.defaultMaxTokens(req.Route)), time.Now())
		if wait > 0 {
			r.paceIn(wait)
			return held
		}
	}
	if err == nil {
		f.r, req.Sink = r, f
		// Not the run's context: a request outlives the claim that
		// started it, and ends by Cancel.
		f.call, err = r.m.cfg.Core.TrySubmit(context.Background(), req)
	}
	switch {
	case errors.Is(err, batcher.ErrQueueFull), errors.Is(err, batcher.ErrQuotaExceeded):
		return refused
	case errors.Is(err, batcher.ErrClosed):
		r.stop()
		return refused
	case err != nil:
		// The core refuses at once when the model cannot serve (its breaker
		// open on every backend): the clearest reason to move on.
		if next := r.moveTo(t, f.model, err); next != "" {
			t.Model = next
			return r.submit(t, next)
		}
		r.pending = append(r.pending, r.outcome(f, batcher.Result{Err: err}))
		return admitted
	}
	r.calls[t.Seq] = f
	r.submitted()
	return admitted
}

// paceIn makes the loop try the backlog again in d, unless its timer fires
// sooner already.
func (r *run) paceIn(d time.Duration) {
	at := time.Now().Add(d)
	if r.paceC != nil && !at.Before(r.paceAt) {
		return
	}
	if r.paceTimer == nil {
		r.paceTimer = time.NewTimer(d)
	} else {
		r.paceTimer.Reset(d) // Go 1.23 timers: no stale tick survives a Reset
	}
	r.paceC, r.paceAt = r.paceTimer.C, at
}
