package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// ending is why a job ends before its tasks are done: cancelled or expired.
type ending uint8

const (
	endNone ending = iota
	endCancel
	endExpire
)

// phase is where a run is in its life. It only moves forward, but for one
// step back: an ended run's poll may find pending tasks again (another
// process returned its claims), and it is ending again.
type phase uint8

const (
	// phaseRunning: the run claims tasks and submits them.
	phaseRunning phase = iota
	// phaseEnding: the job was cancelled or expired (run.ending says
	// which): its pending tasks and backlog are to be ended, and nothing
	// new starts.
	phaseEnding
	// phaseEnded: its pending tasks are ended; once none is in flight,
	// the job ends.
	phaseEnded
	// phaseStopping: this process shuts down (or its core closed):
	// nothing new starts, the results in flight are recorded, and the job
	// is left to the next run.
	phaseStopping
	// phaseOver: the job ended, was deleted or failed: the loop returns.
	phaseOver
)

// supply is what a run knows of its job's tasks left to claim.
type supply uint8

const (
	// supplyUnknown: a claim may find tasks.
	supplyUnknown supply = iota
	// supplyDry: the last claim found fewer than it asked for; the next
	// waits for a commit or a poll.
	supplyDry
	// supplyChecked: dry, and the job's counts were read since (to end
	// it): nothing to do until something changes.
	supplyChecked
)

// run runs one job in this process. One goroutine, loop, owns every field
// from phase down: it claims tasks, submits them, takes their results,
// commits them in groups and appends the output files.
//
// The core delivers each result by callback (inflight.OnEvent) on its own
// goroutine, which queues the call (finished) and nudges the loop (ready);
// no goroutine waits per task in flight.
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

	// ctx bounds every store call of the run: it ends when the job is
	// deleted (abort) or the manager's drain runs out of time, and the
	// loop then returns without waiting on a slow store call. work, its
	// child, bounds the calls that only serve new work (claims, a judge's
	// reads of its runs): it ends too when the job is cancelled or
	// expires, or the manager stops.
	ctx        context.Context
	cancel     context.CancelFunc
	work       context.Context
	cancelWork context.CancelFunc
	unwatch    func() bool // stops cancelling work at the manager's stop

	pokeCh chan struct{} // the job's state may have changed
	done   chan struct{}

	// finished holds the calls whose results the core delivered, until
	// the loop takes them; ready (capacity 1) nudges the loop.
	finMu    sync.Mutex
	finished []*inflight
	ready    chan struct{}

	phase    phase
	ending   ending
	supply   supply
	spare    []*inflight         // finished's other buffer
	calls    map[int64]*inflight // by Seq
	backlog  []Task              // claimed, not yet admitted by the core
	pending  []Outcome           // waiting for their group commit
	out      *output
	exported int64 // done number up to which the files are written
	// recorded is the done number up to which the store holds results, as
	// far as the run knows (MaxInt64: unknown, as at start, when the store
	// may hold lines the files lack: invalid items, a crash). The files
	// are behind while it exceeds exported.
	recorded int64
	lastOut  time.Time
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

// inflight is one task submitted to the core. Its call's result comes
// back through OnEvent, its request's sink.
type inflight struct {
	r       *run // the run whose loop takes the result
	call    *batcher.Call
	task    Task
	model   string
	charged int // tokens charged to the job's tokens per minute at start
	url     string
	tier    string // the OpenAI line's service_tier
	judge   string // the judge's prompt
	res     batcher.Result
}

// OnEvent takes the call's result from the core, on the core's goroutine,
// and hands the call to its run's loop without blocking.
func (f *inflight) OnEvent(ev *batcher.Event) {
	if ev.Kind != batcher.EventDone {
		return
	}
	f.res = *ev.Result // the event's result is not ours to keep
	r := f.r
	r.finMu.Lock()
	r.finished = append(r.finished, f)
	r.finMu.Unlock()
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// WantsProgress tells the core to send the run the results alone.
func (f *inflight) WantsProgress() bool { return false }

type commitResult struct {
	outs []Outcome
	err  error
}

func newRun(m *Manager, j *Job) *run {
	r := &run{m: m, id: j.ID, job: j, lay: layoutOf(&j.Spec), ready: make(chan struct{}, 1),
		pokeCh: make(chan struct{}, 1), done: make(chan struct{}), recorded: math.MaxInt64,
		calls: map[int64]*inflight{}, win: minWindow, commitDone: make(chan commitResult, 1), pace: newPacer(&j.Spec)}
	r.ctx, r.cancel = context.WithCancel(m.runsCtx)
	if dl := j.Deadline(); !dl.IsZero() {
		r.work, r.cancelWork = context.WithDeadline(r.ctx, dl)
	} else {
		r.work, r.cancelWork = context.WithCancel(r.ctx)
	}
	r.unwatch = context.AfterFunc(m.stopping, r.cancelWork)
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

// abort makes the run return at once, its store calls and its requests in
// flight cancelled: the job is being deleted.
func (r *run) abort() { r.cancel() }

func (r *run) logErr(msg string, err error) {
	if r.ctx.Err() != nil {
		return // deleted, or the drain ran out: the error is ours
	}
	r.m.cfg.Logger.Error("jobs: "+msg, "job", r.id, "err", err)
}

// wakers are what the loop waits on besides the run's channels.
type wakers struct {
	expiry   <-chan time.Time // the job's deadline (nil: none, or passed)
	expTimer *time.Timer
	tick     *time.Ticker // commits and polls
	lastPoll time.Time
	requeue  chan []Task     // tasks the batch API hands back
	stop     <-chan struct{} // the manager stops (nil: seen)
}

func (r *run) loop() {
	defer r.m.removeRun(r.id)
	defer close(r.done)
	defer r.m.notify(r.id)
	defer r.cancel()
	defer r.unwatch()
	if !r.begin() {
		return
	}
	defer r.out.close()
	defer r.dropCommit()
	stopUp, ok := r.startUpstream()
	if !ok {
		return
	}
	defer stopUp()
	w := r.newWakers()
	defer w.close()
	defer func() {
		if r.paceTimer != nil {
			r.paceTimer.Stop()
		}
	}()
	for r.phase != phaseOver {
		if r.step() {
			return
		}
		r.await(w)
	}
}

// begin reads the job, marks it running and opens its output files. It
// reports whether the run goes on.
func (r *run) begin() bool {
	st := r.m.cfg.Store
	j, err := st.GetJob(r.ctx, r.id)
	if err != nil {
		return false
	}
	r.job = j
	switch j.State {
	case StateQueued:
		if err := st.Transition(r.ctx, r.id, []State{StateQueued}, StateRunning, ""); err != nil && !errors.Is(err, ErrConflict) {
			r.logErr("starting", err)
			return false
		}
		r.m.notify(r.id)
	case StateCancelling:
		r.ending, r.phase = endCancel, phaseEnding
	}
	if r.out, err = openOutput(r.m.outputBase(j)); err != nil {
		r.fail(err)
		return false
	}
	r.exported = r.out.pos
	return true
}

// startUpstream starts the job's batch-API dispatch when its route has
// one. stop ends it and waits; ok is false when the run cannot go on.
func (r *run) startUpstream() (stop func(), ok bool) {
	br, route := r.m.batchRoute(r.job)
	if br == nil {
		return func() {}, true
	}
	var err error
	if r.up, err = newUpstream(r, br, route); err != nil {
		r.fail(err)
		return nil, false
	}
	uctx, cancel := context.WithCancel(r.ctx)
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		r.up.main(uctx)
	}()
	return func() {
		cancel()
		<-upDone
	}, true
}

func (r *run) newWakers() *wakers {
	w := &wakers{tick: time.NewTicker(r.m.cfg.CommitInterval), lastPoll: time.Now(), stop: r.m.stop}
	if dl := r.job.Deadline(); !dl.IsZero() {
		w.expTimer = time.NewTimer(time.Until(dl))
		w.expiry = w.expTimer.C
	}
	if r.up != nil {
		w.requeue = r.up.requeue
	}
	return w
}

func (w *wakers) close() {
	w.tick.Stop()
	if w.expTimer != nil {
		w.expTimer.Stop()
	}
}

// step does what the run's phase asks before the loop waits: it ends the
// pending tasks, tops up those in flight and, once none is in flight and
// none can start, commits every result and ends the job or returns. It
// reports whether the loop returns.
func (r *run) step() bool {
	if r.phase == phaseEnding {
		r.endPending()
	}
	if r.phase == phaseRunning {
		r.fill()
	}
	if !r.drained() {
		return r.phase == phaseOver
	}
	r.commit(true)
	if r.phase >= phaseStopping {
		return true
	}
	if r.supply != supplyChecked {
		r.supply = supplyChecked
		return r.maybeFinish()
	}
	return false
}

// drained reports whether no task is in flight and none can start until
// something changes.
func (r *run) drained() bool {
	if len(r.calls) > 0 {
		return false
	}
	switch r.phase {
	case phaseRunning:
		return r.supply != supplyUnknown && len(r.backlog) == 0
	case phaseEnding, phaseEnded:
		return len(r.backlog) == 0
	}
	return true
}

// await waits for the next event and takes it.
func (r *run) await(w *wakers) {
	select {
	case <-r.ready:
		r.takeFinished()
	case ts := <-w.requeue:
		// Tasks the batch API did not answer run online.
		r.backlog = append(r.backlog, ts...)
		r.unchecked()
	case <-r.paceC:
		r.paceC = nil // fill runs at the top of the loop
	case res := <-r.commitDone:
		r.committed(res)
		if len(r.pending) >= r.commitSize() {
			r.commit(false)
		}
	case <-w.tick.C:
		r.commit(false)
		if time.Since(w.lastPoll) >= r.m.cfg.PollInterval {
			w.lastPoll = time.Now()
			r.poll()
		}
	case <-r.pokeCh:
		r.poll()
	case <-w.expiry:
		w.expiry = nil
		r.endWith(endExpire)
	case <-w.stop:
		w.stop = nil
		r.stop()
	case <-r.ctx.Done():
		// Deleted, or the manager's drain ran out: what is in flight ends
		// now, and what the store recorded stays.
		r.cancelCalls()
		r.phase = phaseOver
	}
}

// takeFinished handles the results the core delivered since the last time.
func (r *run) takeFinished() {
	r.finMu.Lock()
	fs := r.finished
	r.finished, r.spare = r.spare, nil
	r.finMu.Unlock()
	for _, f := range fs {
		if r.phase == phaseOver {
			break
		}
		r.handle(f)
	}
	clear(fs)
	r.spare = fs[:0]
}

// endWith ends the job as e says: its requests in flight end now (cancelled,
// unless their answer is already in), its pending tasks end, and nothing
// new starts. A stopping run only cancels: the next run ends the rest.
func (r *run) endWith(e ending) {
	r.ending = e
	r.cancelWork()
	r.cancelCalls()
	if r.phase < phaseStopping {
		r.phase = phaseEnding
	}
}

// stop makes the run stop starting tasks and return once those in flight
// are recorded: the manager (or the core) shuts down.
func (r *run) stop() {
	r.cancelWork()
	if r.phase < phaseStopping {
		r.phase = phaseStopping
	}
}

// unchecked says the job's counts may have changed since they were read.
func (r *run) unchecked() {
	if r.supply == supplyChecked {
		r.supply = supplyDry
	}
}

// dried says a claim now would find nothing (or cannot be made).
func (r *run) dried() { r.supply = max(r.supply, supplyDry) }

func (r *run) cancelCalls() {
	for _, f := range r.calls {
		f.call.Cancel()
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

// request builds the core request of a task.
func (r *run) request(ctx context.Context, t *Task, override string) (*inflight, *batcher.Request, error) {
	spec := &r.job.Spec
	f := &inflight{task: *t}
	var ir ItemRequest
	if err := json.Unmarshal(t.Request, &ir); err != nil {
		return f, nil, fmt.Errorf("%w: stored request unreadable: %w", batcher.ErrInvalid, err) // outcome names the line
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
		// The window bounds the job; one call is bounded by the core's
		// limit too, or a window past 24h would fail every item as a
		// request.timeout out of range.
		req.Timeout = min(max(time.Until(dl), time.Millisecond), batcher.MaxTimeout)
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
		BatchID: res.BatchID, Backend: res.Backend, ToolCalls: ro.ToolCalls, Refusal: ro.Refusal, Logprobs: ro.Logprobs, Choices: ro.Choices}
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
		f := &inflight{task: r.backlog[i]}
		r.pending = append(r.pending, r.outcome(f, batcher.Result{Err: batcher.ErrCanceled}))
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
