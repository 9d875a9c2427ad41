package jobs

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

type commitResult struct {
	outs []Outcome
	err  error
}

// handle takes a task's result: a group's next model gets a failed task
// once; otherwise it waits for its group commit.
func (r *run) handle(f *inflight) {
	delete(r.calls, f.task.Seq)
	res := &f.res
	if f.charged > 0 && res.Err == nil {
		used := res.Usage.PromptTokens + res.Usage.CompletionTokens
		r.pace.used(int(used)-f.charged, time.Now())
	}
	if next := r.moveTo(&f.task, f.model, res.Err); next != "" {
		if f.task.Model = next; r.submit(&f.task, next) != admitted {
			r.backlog = append(r.backlog, f.task)
		}
		return
	}
	if q := res.Timings.Queued; q > 0 {
		r.observe(q, time.Now())
	}
	r.pending = append(r.pending, r.outcome(f, *res))
	if len(r.pending) >= r.commitSize() {
		r.commit(false)
	}
}

// moveTo is the model a task that failed with err on model moves to: its
// group's next_model, once, unless the run is ending or the failure is the
// caller's (cancelled) or the request's own (invalid), which no other model
// would change. "" means it does not move.
func (r *run) moveTo(t *Task, model string, err error) string {
	if err == nil || r.ending != endNone || r.phase != phaseRunning || t.Group < 0 || t.Group >= len(r.job.Spec.Groups) {
		return ""
	}
	next := r.job.Spec.Groups[t.Group].NextModel
	if next == "" || model == next || errors.Is(err, batcher.ErrCanceled) || errors.Is(err, batcher.ErrInvalid) {
		return ""
	}
	return next
}

// commitSize is how many results start a group commit before the tick.
func (r *run) commitSize() int { return min(r.m.cfg.CommitSize, max(r.limit()/2, 1)) }

// outcome turns a result into the task's end. With a result that carries
// no error it reads no state of the loop: the batch API's collector calls
// it too.
func (r *run) outcome(f *inflight, res batcher.Result) Outcome {
	t, ro := &f.task, res.ChatOutput()
	rec := Record{URL: f.url, ServiceTier: f.tier, JudgePrompt: f.judge, Text: res.Text, Embedding: res.Embedding, FinishReason: res.FinishReason,
		PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens, Attempts: res.Attempts,
		BatchID: res.BatchID, BatchSize: res.BatchSize, Backend: res.Backend, ToolCalls: ro.ToolCalls, Refusal: ro.Refusal, Logprobs: ro.Logprobs, Choices: ro.Choices}
	o := Outcome{Seq: t.Seq, Group: t.Group, Item: t.Item, Run: t.Run, CustomID: t.CustomID, State: ItemSucceeded, Model: f.model,
		TokensIn: int64(res.Usage.PromptTokens), TokensOut: int64(res.Usage.CompletionTokens),
		JudgeSeq: r.lay.judgeSeq(t.Item), RunsFrom: t.Item * r.lay.k}
	if err := res.Err; err != nil {
		dl := r.job.Deadline()
		switch {
		case r.ending == endExpire || (!dl.IsZero() && !time.Now().Before(dl)):
			o.State, rec.ErrCode, rec.ErrMessage = ItemExpired, CodeExpired, "the job's completion window ended first"
		case r.ending == endCancel && errors.Is(err, batcher.ErrCanceled):
			o.State, rec.ErrCode, rec.ErrMessage = ItemCancelled, CodeCancelled, "the job was cancelled"
		default:
			o.State, rec.ErrCode, rec.ErrMessage = ItemFailed, errorCode(err), spelled(err, f.url)
			if rec.ErrCode == CodeInvalidRequest && t.Line > 0 {
				// Named by its line, as the lines refused at creation are
				// (Creator.addInvalid): OpenAI's error objects carry the
				// line apart, but an error line's error has only code and
				// message.
				rec.ErrMessage = "line " + strconv.FormatInt(t.Line, 10) + ": " + rec.ErrMessage
			}
		}
	}
	if o.State == ItemSucceeded {
		r.m.price(&o, &rec)
	}
	o.Result = encode(&rec)
	return o
}

// outcomeAs is the end of a task that never ran: cancelled or expired
// with the job. It reads no state of the loop.
func (r *run) outcomeAs(f *inflight, state ItemState) Outcome {
	t := &f.task
	rec := errorRecord(CodeCancelled, "the job was cancelled")
	if state == ItemExpired {
		rec = errorRecord(CodeExpired, "the job's completion window ended first")
	}
	return Outcome{Seq: t.Seq, Group: t.Group, Item: t.Item, Run: t.Run, CustomID: t.CustomID, State: state, Model: f.model,
		JudgeSeq: r.lay.judgeSeq(t.Item), RunsFrom: t.Item * r.lay.k, Result: rec}
}

// commit starts recording the pending results in one transaction unless a
// commit is in flight, and catches the output files up with the store (at
// most every 200ms). With force it waits: when it returns, every pending
// result is recorded (or failed to be) and written to the files.
func (r *run) commit(force bool) {
	if r.committing != nil {
		if !force {
			return
		}
		r.committed(<-r.commitDone)
	}
	if len(r.pending) > 0 {
		outs := r.pending
		r.pending = make([]Outcome, 0, cap(outs))
		r.committing = outs
		go func() {
			_, err := r.m.cfg.Store.Complete(r.ctx, r.id, r.m.cfg.Owner, outs)
			r.commitDone <- commitResult{outs, err}
		}()
		if !force {
			return
		}
		if !r.committed(<-r.commitDone) {
			return
		}
	}
	if force || (r.recorded > r.exported && time.Since(r.lastOut) >= 200*time.Millisecond) {
		r.export()
	}
}

// committed takes back the batch of the commit that ended: written to the
// files or, when the commit failed, pending again. It reports whether the
// commit succeeded.
func (r *run) committed(res commitResult) bool {
	r.committing = nil
	if res.err != nil {
		r.logErr("recording results (kept for the next try)", res.err)
		r.pending = append(res.outs, r.pending...)
		return false
	}
	r.m.counts.recorded(res.outs)
	for i := range res.outs {
		r.recorded = max(r.recorded, res.outs[i].DoneSeq)
	}
	r.writeDirect(res.outs)
	r.supply = supplyUnknown
	return true
}

// dropCommit waits for the commit in flight, if any, when the loop returns
// without a final commit (the job was deleted or failed): the store keeps
// what it recorded, and the files catch up at the next run.
func (r *run) dropCommit() {
	if r.committing != nil {
		<-r.commitDone
		r.committing = nil
	}
}

// writeDirect appends outs, just committed, to the files without reading
// them back, when they directly follow what the files hold (no other
// process committed in between); otherwise export reads them back. This
// is the common case, and reading back instead costs 12-13% more CPU and
// 17-21% more allocations per item (BenchmarkJob, SQLite and PostgreSQL).
func (r *run) writeDirect(outs []Outcome) {
	if r.recorded == math.MaxInt64 || r.phase == phaseOver || outs[0].DoneSeq != r.exported+1 {
		return
	}
	tasks := make([]Task, len(outs))
	for i := range outs {
		o := &outs[i]
		if o.DoneSeq != r.exported+int64(i)+1 {
			return // one was dropped: its line comes from whoever holds it
		}
		tasks[i] = Task{Seq: o.Seq, Item: o.Item, Group: o.Group, Run: o.Run, CustomID: o.CustomID, State: o.State,
			Model: o.Model, Result: o.Result, TokensIn: o.TokensIn, TokensOut: o.TokensOut, DoneSeq: o.DoneSeq}
	}
	if err := r.out.write(r.job, tasks); err != nil {
		r.fail(err)
		return
	}
	r.exported = tasks[len(tasks)-1].DoneSeq
}

// export appends every task recorded since the last export to the files.
func (r *run) export() {
	r.lastOut = time.Now()
	for r.phase != phaseOver {
		tasks, err := r.m.cfg.Store.Done(r.ctx, r.id, r.exported, 4096)
		if err != nil {
			r.logErr("reading results for the output files", err)
			return // still behind: tried again
		}
		if err := r.out.write(r.job, tasks); err != nil {
			r.fail(err)
			return
		}
		if len(tasks) > 0 {
			r.exported = tasks[len(tasks)-1].DoneSeq
		}
		if len(tasks) < 4096 {
			r.recorded = r.exported
			return
		}
	}
}
