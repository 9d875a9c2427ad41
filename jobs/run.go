package jobs

import (
	"context"
	"errors"
	"math"
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

	// tail holds the job's last requests no longer than their routes'
	// normal window (run_tail.go).
	tail tail

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
		r.tail.stop()
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
		r.armTail()
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
	case <-r.tail.c:
		r.flushTail()
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
