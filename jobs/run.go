package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

type ending uint8

const (
	endNone ending = iota
	endCancel
	endExpire
)

// run runs one job in this process. One goroutine, loop, owns every field
// below the channels: it claims tasks, submits them, collects their results
// from the waiters, commits them in groups and appends the output files.
//
// A group commit runs on a goroutine of its own while the loop goes on
// claiming and submitting: the loop hands it the batch (committing) and
// takes it back from commitDone. At most one commit is in flight, so that
// the files take the groups in the order the store numbered them.
type run struct {
	m   *Manager
	id  string
	job *Job // as at start; its spec does not change
	lay layout

	results chan finished
	pokeCh  chan struct{} // the job's state may have changed
	abortCh chan struct{} // the job is being deleted
	abortMu sync.Once
	done    chan struct{}

	calls    map[int64]*inflight // by Seq
	backlog  []Task              // claimed, not yet admitted by the core
	pending  []Outcome           // waiting for their group commit
	out      *output
	exported int64 // done number up to which the files are written
	behind   bool  // the store holds results the files lack
	lastOut  time.Time
	ending   ending
	needEnd  bool // pending tasks must be ended (cancel, expiry)
	dry      bool // the last claim found fewer tasks than asked
	checked  bool // counts checked since the last change
	stopping bool
	over     bool // the job ended, was deleted or failed: return
	tmpl     *template.Template

	// win is the job's window of requests in flight, sized to what the
	// backends serve within the queue target: it doubles per round while
	// no request waits past the target (slow start), then grows by one per
	// round and halves, at most once per target, when one does.
	win     float64
	grown   bool // a wait past the target has been seen: no slow start
	lastCut time.Time

	// pace holds the job's own limits on starts (group delays, requests
	// and tokens per minute); paceC fires when a task it held may start
	// (nil: none held).
	pace      *pacer
	paceTimer *time.Timer
	paceC     <-chan time.Time
	paceAt    time.Time
	// full: the core refused a task in this fill (queue full, a quota):
	// the backlog waits for the next round.
	full bool

	// up, when set, dispatches the job's tasks through a provider's batch
	// API (batchapi.go) on goroutines of its own; the loop then claims
	// nothing itself and runs online only what up hands back.
	up *upstream

	// committing is the batch of the commit in flight (nil: none); the
	// commit's goroutine owns it until it reports on commitDone
	// (capacity 1).
	committing []Outcome
	commitDone chan commitResult
}

// minWindow is the least a job keeps in flight: a batch's worth.
const minWindow = 8

type inflight struct {
	call    *batcher.Call
	task    Task
	model   string
	charged int // tokens charged to the job's tokens per minute at start
	url     string
	tier    string // the OpenAI line's service_tier
	judge   string // the judge's prompt
}

type finished struct {
	f   *inflight
	res batcher.Result
}

type commitResult struct {
	outs []Outcome
	err  error
}

func newRun(m *Manager, j *Job) *run {
	r := &run{m: m, id: j.ID, job: j, lay: layoutOf(&j.Spec), results: make(chan finished, 1024),
		pokeCh: make(chan struct{}, 1), abortCh: make(chan struct{}), done: make(chan struct{}),
		calls: map[int64]*inflight{}, win: minWindow, commitDone: make(chan commitResult, 1), pace: newPacer(&j.Spec)}
	if jd := j.Spec.Judge; jd != nil {
		r.tmpl, _ = template.New("judge").Option("missingkey=zero").Parse(jd.PromptTemplate) // validated at creation
	}
	return r
}

func (r *run) poke() {
	select {
	case r.pokeCh <- struct{}{}:
	default:
	}
}

func (r *run) abort() { r.abortMu.Do(func() { close(r.abortCh) }) }

func (r *run) logErr(msg string, err error) {
	r.m.cfg.Logger.Error("jobs: "+msg, "job", r.id, "err", err)
}

func (r *run) loop() {
	defer r.m.removeRun(r.id)
	defer close(r.done)
	defer r.m.notify(r.id)
	ctx := context.Background()
	st := r.m.cfg.Store
	j, err := st.GetJob(ctx, r.id)
	if err != nil {
		return
	}
	r.job = j
	switch j.State {
	case StateQueued:
		if err := st.Transition(ctx, r.id, []State{StateQueued}, StateRunning, ""); err != nil && !errors.Is(err, ErrConflict) {
			r.logErr("starting", err)
			return
		}
		r.m.notify(r.id)
	case StateCancelling:
		r.ending, r.needEnd = endCancel, true
	}
	if r.out, err = openOutput(r.m.outputBase(j)); err != nil {
		r.fail(ctx, err)
		return
	}
	defer r.out.close()
	defer r.dropCommit()
	r.exported = r.out.pos
	r.behind = true // the store may hold lines the files lack (invalid items, a crash)
	var requeue chan []Task
	if br, route := r.m.batchRoute(j); br != nil {
		if r.up, err = newUpstream(r, br, route); err != nil {
			r.fail(ctx, err)
			return
		}
		requeue = r.up.requeue
		uctx, cancel := context.WithCancel(ctx)
		upDone := make(chan struct{})
		go func() {
			defer close(upDone)
			r.up.main(uctx)
		}()
		defer func() {
			cancel()
			<-upDone
		}()
	}
	var expiry <-chan time.Time
	if dl := j.Deadline(); !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		expiry = t.C
	}
	tick := time.NewTicker(r.m.cfg.CommitInterval)
	defer tick.Stop()
	defer func() {
		if r.paceTimer != nil {
			r.paceTimer.Stop()
		}
	}()
	lastPoll := time.Now()
	stop := r.m.stop
	for !r.over {
		if r.needEnd {
			r.endPending(ctx)
		}
		if r.ending == endNone && !r.stopping {
			r.fill(ctx)
		}
		if len(r.calls) == 0 && (r.dry || r.ending != endNone || r.stopping) && (len(r.backlog) == 0 || r.stopping) {
			r.commit(ctx, true)
			if r.stopping || r.over {
				return
			}
			if !r.checked {
				r.checked = true
				if r.maybeFinish(ctx) {
					return
				}
			}
		}
		select {
		case f := <-r.results:
			r.handle(ctx, f)
		case ts := <-requeue:
			// Tasks the batch API did not answer run online.
			r.backlog = append(r.backlog, ts...)
			r.checked = false
		case <-r.paceC:
			r.paceC = nil // fill runs at the top of the loop
		case res := <-r.commitDone:
			r.committed(res)
			if len(r.pending) >= r.commitSize() {
				r.commit(ctx, false)
			}
		case <-tick.C:
			r.commit(ctx, false)
			if time.Since(lastPoll) >= r.m.cfg.PollInterval {
				lastPoll = time.Now()
				r.poll(ctx)
			}
		case <-r.pokeCh:
			r.poll(ctx)
		case <-expiry:
			expiry = nil
			r.ending, r.needEnd = endExpire, true
			for _, f := range r.calls {
				f.call.Cancel()
			}
		case <-stop:
			stop = nil
			r.stopping = true
		case <-r.abortCh:
			r.abortCh = nil
			for _, f := range r.calls {
				f.call.Cancel()
			}
			r.stopping, r.over = true, true
		}
	}
}

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

// fill tops the job's tasks in flight up to its limit: first those claimed
// earlier that the core could not take, then a new claim.
//
// A task counts as in flight from its claim until its result is committed,
// so that a crash redoes at most the job's limit of tasks.
func (r *run) fill(ctx context.Context) {
	limit := r.limit()
	r.full = false
	if len(r.backlog) > 0 {
		// Tasks the pacer holds stay, in order, while later ones (of
		// another group) may start.
		kept := r.backlog[:0]
		for i := range r.backlog {
			if r.full || r.busy() >= limit {
				kept = append(kept, r.backlog[i:]...)
				break
			}
			t := r.backlog[i]
			if !r.submit(ctx, &t, t.Model) {
				kept = append(kept, t)
			}
		}
		clear(r.backlog[len(kept):])
		r.backlog = kept
	}
	if r.up != nil {
		r.dry = true // the batch API claims the job's tasks
	}
	if len(r.backlog) > 0 || r.dry {
		return
	}
	busy := r.busy()
	n := limit - busy
	// Claim in chunks, not one task at a time.
	if n <= 0 || (busy > 0 && n < max(1, limit/8)) {
		return
	}
	n = min(n, 1024)
	tasks, err := r.m.cfg.Store.Claim(ctx, r.id, r.m.cfg.Owner, n, r.m.cfg.Lease)
	if err != nil {
		r.logErr("claiming tasks", err)
		r.dry = true // try again at the next poll
		return
	}
	if len(tasks) < n {
		r.dry = true
	}
	for i := range tasks {
		if r.full {
			r.backlog = append(r.backlog, tasks[i:]...)
			return
		}
		if !r.submit(ctx, &tasks[i], "") {
			r.backlog = append(r.backlog, tasks[i])
		}
	}
}

// busy is how many of the job's tasks count as in flight: from their claim
// until their result is committed.
func (r *run) busy() int { return len(r.calls) + len(r.pending) + len(r.committing) }

// submit hands a task to the core, on model when it is set. It reports
// false when the task cannot start now: the job's pacer holds it, or the
// core cannot take it (queue full, the tenant over a quota, shutting down;
// r.full is set then); the caller keeps it in the backlog, its model in
// t.Model. A task the core rejects as invalid ends failed.
func (r *run) submit(ctx context.Context, t *Task, model string) bool {
	f, req, err := r.request(ctx, t, model)
	if err == nil && r.pace.limited() {
		var wait time.Duration
		f.charged, wait = r.pace.admit(t.Group, req.EstimatedTokens(r.m.defaultMaxTokens(req.Route)), time.Now())
		if wait > 0 {
			r.paceIn(wait)
			return false
		}
	}
	if err == nil {
		f.call, err = r.m.cfg.Core.TrySubmit(ctx, req)
	}
	switch {
	case errors.Is(err, batcher.ErrQueueFull), errors.Is(err, batcher.ErrQuotaExceeded):
		r.full = true
		return false
	case errors.Is(err, batcher.ErrClosed):
		r.stopping, r.full = true, true
		return false
	case err != nil:
		// The core refuses at once when the model cannot serve (its breaker
		// open on every backend): the clearest reason to move on.
		if next := r.moveTo(t, f.model, err); next != "" {
			t.Model = next
			return r.submit(ctx, t, next)
		}
		r.pending = append(r.pending, r.outcome(f, batcher.Result{Err: err}))
		return true
	}
	r.calls[t.Seq] = f
	go r.wait(f)
	return true
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

func (r *run) wait(f *inflight) {
	select {
	case <-f.call.Done():
	case <-r.done:
		return
	}
	select {
	case r.results <- finished{f, f.call.Result()}:
	case <-r.done:
	}
}

// request builds the core request of a task.
func (r *run) request(ctx context.Context, t *Task, override string) (*inflight, *batcher.Request, error) {
	spec := &r.job.Spec
	f := &inflight{task: *t}
	var ir ItemRequest
	if err := json.Unmarshal(t.Request, &ir); err != nil {
		return f, nil, fmt.Errorf("%w: line %d: stored request unreadable: %w", batcher.ErrInvalid, t.Line, err)
	}
	f.url, f.tier = ir.URL, ir.ServiceTier
	req := &batcher.Request{
		ID: r.id + "/" + strconv.FormatInt(t.Seq, 10),
		// The job's tenant: its items share the tenant's fair share and
		// quotas with its online requests.
		Tenant:   r.job.Tenant,
		Priority: spec.Priority,
		Input:    ir.Input,
		Params:   mergeParams(ir.Params, spec.Params),
		Metadata: ir.Metadata,
	}
	ir.setRich(req)
	model := cmp.Or(ir.Model, spec.Model)
	switch {
	case t.Group >= 0 && t.Group < len(spec.Groups):
		g := &spec.Groups[t.Group]
		model = cmp.Or(g.Model, model)
		if g.Temperature != nil {
			req.Params.Temperature = g.Temperature
		}
		if t.Run < len(g.Seeds) {
			seed := g.Seeds[t.Run]
			req.Params.Seed = &seed
		}
	case t.Group == GroupJudge && spec.Judge != nil:
		model = spec.Judge.Model
		prompt, err := r.judgePrompt(ctx, t, &ir)
		if err != nil {
			return f, nil, err
		}
		f.judge = prompt
		req.Params = spec.Judge.Params
		// The judge reads the runs' outputs: the item's tools and format
		// are the runs', not its own.
		(&ItemRequest{}).setRich(req)
		if op, _ := r.m.route(model); op == batcher.OpCompletion {
			req.Input = batcher.Input{Op: batcher.OpCompletion, Prompt: prompt}
		} else {
			req.Input = batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: prompt}}}
		}
		f.url, f.tier = "", ""
	}
	model = cmp.Or(override, model)
	f.model = model
	req.Route = model
	req.Retry = r.retry(t)
	if dl := r.job.Deadline(); !dl.IsZero() {
		req.Timeout = max(time.Until(dl), time.Millisecond)
	}
	return f, req, nil
}

// retry is a task's override of its backend's retry policy: its group's
// settings, then the job's; nil when neither sets any. A spec with only
// retry_delay keeps the backend's retry count.
func (r *run) retry(t *Task) *batcher.RetryOverride {
	spec := &r.job.Spec
	maxRetries, delay := spec.MaxRetries, spec.RetryDelay
	var factor float64
	if t.Group >= 0 && t.Group < len(spec.Groups) {
		g := &spec.Groups[t.Group]
		maxRetries = cmp.Or(g.MaxRetries, maxRetries)
		delay = cmp.Or(g.RetryDelay, delay)
		factor = g.BackoffFactor
	}
	if maxRetries == nil && delay == 0 && factor == 0 {
		return nil
	}
	o := &batcher.RetryOverride{MaxRetries: batcher.PolicyMaxRetries, InitialBackoff: delay, Factor: factor}
	if maxRetries != nil {
		o.MaxRetries = *maxRetries
	}
	return o
}

// mergeParams fills the item's unset parameters from the job's defaults.
func mergeParams(p, def batcher.Params) batcher.Params {
	if p.MaxTokens == 0 {
		p.MaxTokens = def.MaxTokens
	}
	if p.Temperature == nil {
		p.Temperature = def.Temperature
	}
	if p.TopP == nil {
		p.TopP = def.TopP
	}
	if p.Stop == nil {
		p.Stop = def.Stop
	}
	if p.Seed == nil {
		p.Seed = def.Seed
	}
	return p
}

// JudgeRun is one run as a judge's template sees it.
type JudgeRun struct {
	Group  string
	Run    int
	Model  string
	Output string
	Error  string
}

// JudgeInput is what a judge's template receives.
type JudgeInput struct {
	// Input is the item's last message or its prompt.
	Input string
	Runs  []JudgeRun
}

func (r *run) judgePrompt(ctx context.Context, t *Task, ir *ItemRequest) (string, error) {
	from := t.Item * r.lay.k
	runs, err := r.m.cfg.Store.Tasks(ctx, r.id, from, t.Seq)
	if err != nil {
		return "", err
	}
	in := JudgeInput{Input: lastText(&ir.Input)}
	for i := range runs {
		rec, _ := DecodeRecord(runs[i].Result)
		in.Runs = append(in.Runs, JudgeRun{Group: r.job.GroupName(runs[i].Group), Run: runs[i].Run, Model: runs[i].Model,
			Output: rec.Text, Error: rec.ErrMessage})
	}
	var b strings.Builder
	if err := r.tmpl.Execute(&b, &in); err != nil {
		return "", fmt.Errorf("%w: judge template: %w", batcher.ErrInvalid, err)
	}
	return b.String(), nil
}

func lastText(in *batcher.Input) string {
	switch in.Op {
	case batcher.OpChat:
		if n := len(in.Messages); n > 0 {
			return in.Messages[n-1].Text()
		}
	case batcher.OpCompletion:
		return in.Prompt
	case batcher.OpEmbedding:
		return in.Text
	}
	return ""
}

// handle takes a task's result: a group's next model gets a failed task
// once; otherwise it waits for its group commit.
func (r *run) handle(ctx context.Context, fin finished) {
	f := fin.f
	delete(r.calls, f.task.Seq)
	if f.charged > 0 && fin.res.Err == nil {
		used := fin.res.Usage.PromptTokens + fin.res.Usage.CompletionTokens
		r.pace.used(int(used)-f.charged, time.Now())
	}
	if next := r.moveTo(&f.task, f.model, fin.res.Err); next != "" {
		if f.task.Model = next; !r.submit(ctx, &f.task, next) {
			r.backlog = append(r.backlog, f.task)
		}
		return
	}
	if q := fin.res.Timings.Queued; q > 0 {
		r.observe(q, time.Now())
	}
	r.pending = append(r.pending, r.outcome(f, fin.res))
	if len(r.pending) >= r.commitSize() {
		r.commit(ctx, false)
	}
}

// moveTo is the model a task that failed with err on model moves to: its
// group's next_model, once, unless the run is ending or the failure is the
// caller's (cancelled) or the request's own (invalid), which no other model
// would change. "" means it does not move.
func (r *run) moveTo(t *Task, model string, err error) string {
	if err == nil || r.ending != endNone || r.stopping || t.Group < 0 || t.Group >= len(r.job.Spec.Groups) {
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

// outcome turns a result into the task's end.
func (r *run) outcome(f *inflight, res batcher.Result) Outcome {
	t := &f.task
	rec := Record{URL: f.url, ServiceTier: f.tier, JudgePrompt: f.judge, Text: res.Text, Embedding: res.Embedding, FinishReason: res.FinishReason,
		PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens, Attempts: res.Attempts,
		BatchID: res.BatchID, Backend: res.Backend, ToolCalls: res.ToolCalls, Refusal: res.Refusal, Logprobs: res.Logprobs, Choices: res.Choices}
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
// commit is in flight, and appends the output files (at most every 200ms).
// With force it waits: when it returns, every pending result is recorded
// (or failed to be) and written to the files.
func (r *run) commit(ctx context.Context, force bool) {
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
			_, err := r.m.cfg.Store.Complete(ctx, r.id, r.m.cfg.Owner, outs)
			r.commitDone <- commitResult{outs, err}
		}()
		if !force {
			return
		}
		if !r.committed(<-r.commitDone) {
			return
		}
	}
	if force || (r.behind && time.Since(r.lastOut) >= 200*time.Millisecond) {
		r.export(ctx)
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
	r.m.cost.recorded(res.outs)
	if !r.writeDirect(res.outs) {
		r.behind = true
	}
	r.dry, r.checked = false, false
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
// process committed in between). It reports whether it did.
func (r *run) writeDirect(outs []Outcome) bool {
	if r.behind || r.over || outs[0].DoneSeq != r.exported+1 {
		return false
	}
	tasks := make([]Task, len(outs))
	for i := range outs {
		o := &outs[i]
		if o.DoneSeq != r.exported+int64(i)+1 {
			return false // one was dropped: its line comes from whoever holds it
		}
		tasks[i] = Task{Seq: o.Seq, Item: o.Item, Group: o.Group, Run: o.Run, CustomID: o.CustomID, State: o.State,
			Model: o.Model, Result: o.Result, TokensIn: o.TokensIn, TokensOut: o.TokensOut, DoneSeq: o.DoneSeq}
	}
	if err := r.out.write(r.job, tasks); err != nil {
		r.fail(context.Background(), err)
		return true
	}
	r.exported = tasks[len(tasks)-1].DoneSeq
	return true
}

// export appends every task recorded since the last export to the files.
func (r *run) export(ctx context.Context) {
	r.lastOut = time.Now()
	r.behind = false
	for !r.over {
		tasks, err := r.m.cfg.Store.Done(ctx, r.id, r.exported, 4096)
		if err != nil {
			r.logErr("reading results for the output files", err)
			r.behind = true
			return
		}
		if err := r.out.write(r.job, tasks); err != nil {
			r.fail(ctx, err)
			return
		}
		if len(tasks) > 0 {
			r.exported = tasks[len(tasks)-1].DoneSeq
		}
		if len(tasks) < 4096 {
			return
		}
	}
}

// endPending ends the job's pending tasks as cancelled or expired.
func (r *run) endPending(ctx context.Context) {
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
		n, err := r.m.cfg.Store.EndPending(ctx, r.id, state, rec, 2000)
		if err != nil {
			r.logErr("ending pending tasks", err)
			return
		}
		if n == 0 {
			break
		}
	}
	r.needEnd = false
	r.checked = false
	// Claimed tasks not yet admitted end too.
	for i := range r.backlog {
		f := &inflight{task: r.backlog[i]}
		r.pending = append(r.pending, r.outcome(f, batcher.Result{Err: batcher.ErrCanceled}))
	}
	r.backlog = nil
}

// poll rereads the job: another process (or Cancel) may have changed it.
func (r *run) poll(ctx context.Context) {
	r.dry, r.checked = false, false
	j, err := r.m.cfg.Store.GetJob(ctx, r.id)
	switch {
	case errors.Is(err, ErrNotFound):
		r.over = true
		return
	case err != nil:
		return
	}
	if j.State == StateCancelling && r.ending == endNone {
		r.ending, r.needEnd = endCancel, true
		// Cancelling stops the spending: requests in flight end now
		// (cancelled, unless their answer is already in), not when
		// their upstream calls return.
		for _, f := range r.calls {
			f.call.Cancel()
		}
	}
	if r.ending != endNone {
		r.needEnd = true // another process may have returned claims meanwhile
	}
	if j.State.Terminal() && len(r.calls) == 0 {
		r.commit(ctx, true)
		r.over = true
	}
}

// maybeFinish ends the job when none of its tasks is pending or running,
// and reports whether the run is over.
func (r *run) maybeFinish(ctx context.Context) bool {
	st := r.m.cfg.Store
	j, err := st.GetJob(ctx, r.id)
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
		if err := st.Transition(ctx, r.id, []State{StateRunning, StateQueued}, StateFinalizing, ""); err != nil && !errors.Is(err, ErrConflict) {
			r.logErr("finalizing", err)
			return false
		}
		r.m.notify(r.id)
	}
	r.export(ctx)
	if err := r.out.sync(); err != nil {
		r.fail(ctx, r.out.fail(err))
		return true
	}
	if r.over {
		return true
	}
	// summary.json is there before the job is seen terminal (a watcher
	// reads it at once), and written again with the stored end after.
	if j, err = st.GetJob(ctx, r.id); err == nil {
		j.State, j.EndedAt = final, time.Now()
		if err := writeSummary(r.out.root, j); err != nil {
			r.logErr("writing the summary", err)
		}
	}
	from := []State{StateRunning, StateQueued, StateFinalizing, StateCancelling}
	if err := st.Transition(ctx, r.id, from, final, ""); err != nil && !errors.Is(err, ErrConflict) {
		r.logErr("ending", err)
		return false
	}
	if j, err = st.GetJob(ctx, r.id); err == nil {
		if err := writeSummary(r.out.root, j); err != nil {
			r.logErr("writing the summary", err)
		}
	}
	r.m.notify(r.id)
	return true
}

// fail ends the job FAILED with err (a full disk, an unwritable directory):
// what was written stays, nothing more is.
func (r *run) fail(ctx context.Context, err error) {
	r.over = true
	for _, f := range r.calls {
		f.call.Cancel()
	}
	from := []State{StateQueued, StateRunning, StateFinalizing, StateCancelling}
	if terr := r.m.cfg.Store.Transition(ctx, r.id, from, StateFailed, err.Error()); terr != nil {
		r.logErr("failing the job", errors.Join(err, terr))
		return
	}
	r.m.cfg.Logger.Error("jobs: job failed", "job", r.id, "err", err)
	r.m.notify(r.id)
}
