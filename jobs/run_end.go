package jobs

import (
	"errors"
	"log/slog"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// endPending ends the job's pending tasks as cancelled or expired.
func (r *run) endPending() {
	state, rec := ItemCancelled, errorRecord(CodeCancelled, "the job was cancelled")
	if r.ending == endExpire {
		state, rec = ItemExpired, errorRecord(CodeExpired, "the job's completion window ended first")
	}
	for {
		select {
		case <-r.m.stop:
			return // shutting down: the next run ends the rest
		default:
		}
		n, err := r.m.cfg.Store.EndPending(r.ctx, r.id, state, rec, 2000)
		if err != nil {
			r.logErr("ending pending tasks", err)
			return
		}
		if n == 0 {
			break
		}
	}
	r.phase = phaseEnded
	r.unchecked()
	// Claimed tasks not yet admitted end too.
	for i := range r.backlog {
		r.pending = append(r.pending, r.outcome(r.unrun(r.backlog[i]), batcher.Result{Err: batcher.ErrCanceled}))
	}
	r.backlog = nil
}

// poll rereads the job: another process (or Cancel) may have changed it.
func (r *run) poll() {
	r.supply = supplyUnknown
	j, err := r.m.cfg.Store.GetJob(r.ctx, r.id)
	switch {
	case errors.Is(err, ErrNotFound):
		r.phase = phaseOver
		return
	case err != nil:
		return
	}
	if j.State == StateCancelling && r.ending == endNone {
		// Cancelling stops the spending: requests in flight end now, not
		// when their upstream calls return.
		r.endWith(endCancel)
	}
	if r.phase == phaseEnded {
		r.phase = phaseEnding // another process may have returned claims meanwhile
	}
	if j.State.Terminal() && len(r.calls) == 0 {
		r.commit(true)
		r.phase = phaseOver
	}
}

// maybeFinish ends the job when none of its tasks is pending or running,
// and reports whether the run is over.
func (r *run) maybeFinish() bool {
	st := r.m.cfg.Store
	j, err := st.GetJob(r.ctx, r.id)
	if err != nil {
		return errors.Is(err, ErrNotFound)
	}
	if j.State.Terminal() {
		return true
	}
	if j.Counts.Pending > 0 || j.Counts.Running > 0 {
		return false
	}
	final := StateCompleted
	switch {
	case r.ending == endExpire:
		final = StateExpired
	case r.ending == endCancel || j.State == StateCancelling:
		final = StateCancelled
	}
	if final == StateCompleted {
		if err := st.Transition(r.ctx, r.id, []State{StateRunning, StateQueued}, StateFinalizing, ""); err != nil && !errors.Is(err, ErrConflict) {
			r.logErr("finalizing", err)
			return false
		}
		r.m.notify(r.id)
	}
	r.export()
	if err := r.out.sync(); err != nil {
		r.fail(r.out.fail(err))
		return true
	}
	if r.phase == phaseOver {
		return true
	}
	return r.finish(final)
}

// finish writes summary.json and moves the job to final, its end; it
// reports whether the run is over.
func (r *run) finish(final State) bool {
	st := r.m.cfg.Store
	// summary.json is there before the job is seen terminal (a watcher
	// reads it at once), and written again with the stored end after.
	if j, err := st.GetJob(r.ctx, r.id); err == nil {
		j.State, j.EndedAt = final, time.Now()
		if err := writeSummary(r.out.root, j); err != nil {
			r.logErr("writing the summary", err)
		}
	}
	from := []State{StateRunning, StateQueued, StateFinalizing, StateCancelling}
	if err := st.Transition(r.ctx, r.id, from, final, ""); err != nil && !errors.Is(err, ErrConflict) {
		r.logErr("ending", err)
		return false
	}
	if j, err := st.GetJob(r.ctx, r.id); err == nil {
		if err := writeSummary(r.out.root, j); err != nil {
			r.logErr("writing the summary", err)
		}
		logEnded(r.m.cfg.Logger, j)
	}
	r.m.notify(r.id)
	return true
}

// logEnded logs a job's end with the figures summary.json holds, so that
// an operator reading the log sees what each job did and cost.
func logEnded(log *slog.Logger, j *Job) {
	c := j.Counts
	var secs float64
	if !j.StartedAt.IsZero() && !j.EndedAt.IsZero() {
		secs = j.EndedAt.Sub(j.StartedAt).Seconds()
	}
	log.Info("jobs: job ended", "job", j.ID, "name", j.Spec.Name, "tenant", j.Tenant, "state", j.State.String(),
		"total", c.Total, "succeeded", c.Succeeded, "failed", c.Failed, "cancelled", c.Cancelled, "expired", c.Expired,
		"tokens_in", j.TokensIn, "tokens_out", j.TokensOut, "cost_usd", j.Cost, "saving_usd", j.Saving(), "seconds", secs)
}

// fail ends the job FAILED with err (a full disk, an unwritable directory):
// what was written stays, nothing more is.
func (r *run) fail(err error) {
	r.phase = phaseOver
	r.cancelCalls()
	from := []State{StateQueued, StateRunning, StateFinalizing, StateCancelling}
	if terr := r.m.cfg.Store.Transition(r.ctx, r.id, from, StateFailed, err.Error()); terr != nil {
		r.logErr("failing the job", errors.Join(err, terr))
		return
	}
	r.m.cfg.Logger.Error("jobs: job failed", "job", r.id, "err", err)
	r.m.notify(r.id)
}
