package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
)

// The dispatch modes of Spec.Dispatch.
const (
	DispatchOnline   = "online"
	DispatchBatchAPI = "batch_api"
	// DispatchAuto: the batch API when the job's completion window is
	// unset or at least the provider's, online otherwise.
	DispatchAuto = "auto"
)

// Defaults of BatchRoute.
const (
	DefaultBatchPollMin = 5 * time.Second
	DefaultBatchPollMax = 5 * time.Minute
)

// BatchRoute is a route's provider batch API (Config.BatchRoutes): jobs
// that choose it send their tasks there, at the provider's batch price.
type BatchRoute struct {
	Upstream batchapi.Upstream
	// Model is the provider's model name; default the route's name.
	Model string
	// MaxRequests and MaxBytes bound one upstream batch; default and at
	// most the provider's Limits.
	MaxRequests int
	MaxBytes    int64
	// Gather is how long a job waits for more tasks before it submits an
	// upstream batch smaller than MaxRequests: tasks that come back from
	// other upstream batches to be sent again, and tasks released later (a
	// judge's). Default 0: a batch goes as soon as the store has no more.
	Gather time.Duration
	// PollMin and PollMax bound the backoff between two looks at a batch
	// upstream, and between two tries of a step that failed for a while
	// (5xx, 429, a connection reset). Defaults DefaultBatchPollMin and
	// DefaultBatchPollMax.
	PollMin, PollMax time.Duration
	// MaxEnqueuedTokens is the provider's budget of enqueued tokens on the
	// route (OpenAI's batch queue limit): the upstream batches the route's
	// jobs have created and that have not ended hold at most that many
	// tokens (their lines' bytes at four a token plus max_tokens); a batch
	// waits for earlier ones to end rather than be refused. 0: no bound.
	MaxEnqueuedTokens int64
	// CreateTimeout bounds one create call; it is also how long a restart
	// waits, after a create call a kill cut off began, for the batch it
	// may still make before creating one, looking for it meanwhile
	// (twins.go). Default
	// DefaultBatchCreateTimeout.
	CreateTimeout time.Duration
}

// batchRoute returns the batch API a job dispatches to, or nil when it
// runs online. auto takes the batch API when the job's deadline leaves at
// least the provider's completion window (or it has none), and keeps it
// once the job has upstream batches (a restart later in the window does
// not strand them).
func (m *Manager) batchRoute(j *Job) (*BatchRoute, string) {
	s := &j.Spec
	br, ok := m.cfg.BatchRoutes[s.Model]
	if !ok || br.Upstream == nil {
		return nil, ""
	}
	switch s.Dispatch {
	case DispatchBatchAPI:
	case DispatchAuto:
		if !windowAllows(j.Deadline(), br.Upstream.Limits().Window, time.Now()) && !m.hasChunks(j.ID) {
			return nil, ""
		}
	default:
		return nil, ""
	}
	return &br, s.Model
}

// windowAllows reports whether work started at now within a provider's
// completion window ends before deadline (zero: none).
func windowAllows(deadline time.Time, window time.Duration, now time.Time) bool {
	return deadline.IsZero() || !deadline.Before(now.Add(window))
}

// hasChunks reports whether the job has recorded upstream batches.
func (m *Manager) hasChunks(id string) bool {
	cs, ok := m.cfg.Store.(ChunkStore)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chunks, err := cs.Chunks(ctx, id)
	return err == nil && len(chunks) > 0
}

// validateDispatch checks spec.dispatch.
func (m *Manager) validateDispatch(s *Spec) error {
	switch s.Dispatch {
	case "", DispatchOnline, DispatchAuto:
		return nil
	case DispatchBatchAPI:
		if br, ok := m.cfg.BatchRoutes[s.Model]; !ok || br.Upstream == nil {
			return kindErr(ErrInvalid, "spec.dispatch: batch_api needs spec.model to name a route with batch_api enabled, got %q", cut(s.Model))
		}
		return nil
	}
	return kindErr(ErrInvalid, "spec.dispatch: online, batch_api or auto, got %q", cut(s.Dispatch))
}

// upstream dispatches one job's tasks through a batch API: it claims them
// in chunks of at most an upstream batch, writes each chunk's input to a
// spool file as it streams the tasks, uploads it, creates the batch, polls
// it, and records the results through the store. Every id is recorded
// (Chunk) before the next step, so that another run resumes where this
// one stopped. It runs on goroutines of its own beside the run's loop: main
// claims chunks, and one goroutine drives each chunk (drive). Tasks the
// upstream did not answer go to a new upstream batch when the job's
// deadline leaves a provider's window (rebatch, to main), or to the loop
// to run online (requeue).
type upstream struct {
	r     *run
	br    BatchRoute
	route string
	lim   batchapi.Limits
	cs    ChunkStore
	// budget is the route's enqueued tokens (nil: no bound).
	budget *tokenBudget
	// requeue takes tasks to the run's loop, which runs them online.
	requeue chan []Task
	// rebatch takes tasks back to main for a new upstream batch; quit is
	// closed when main returns (no one takes them then).
	rebatch chan []Task
	quit    chan struct{}
	wg      sync.WaitGroup

	mu sync.Mutex
	// active counts the chunks being driven; idle is closed when it drops
	// to 0 (guarded by mu).
	active int
	idle   chan struct{}
	// createMu makes the job's create calls take turns (create).
	createMu sync.Mutex
	// lastCreate is when the job's last create call returned (guarded
	// by createMu; createStart).
	lastCreate time.Time
	// tries counts the upstream batches each task went back from
	// (guarded by mu): after maxUpstreamTries it runs online.
	tries map[int64]int
}

// maxUpstreamTries bounds the upstream batches one task goes to.
const maxUpstreamTries = 3

func newUpstream(r *run, br *BatchRoute, route string) (*upstream, error) {
	cs, ok := r.m.cfg.Store.(ChunkStore)
	if !ok {
		return nil, errors.New("jobs: the store cannot keep upstream batches (ChunkStore)")
	}
	u := &upstream{r: r, br: *br, route: route, lim: br.Upstream.Limits(), cs: cs, requeue: make(chan []Task, 16),
		rebatch: make(chan []Task), quit: make(chan struct{}), tries: map[int64]int{}}
	if u.br.Model == "" {
		u.br.Model = route
	}
	if u.br.MaxRequests <= 0 || u.br.MaxRequests > u.lim.MaxRequests {
		u.br.MaxRequests = u.lim.MaxRequests
	}
	if u.br.MaxBytes <= 0 || u.br.MaxBytes > u.lim.MaxBytes {
		u.br.MaxBytes = u.lim.MaxBytes
	}
	if u.br.PollMin <= 0 {
		u.br.PollMin = DefaultBatchPollMin
	}
	if u.br.PollMax < u.br.PollMin {
		u.br.PollMax = max(u.br.PollMin, DefaultBatchPollMax)
	}
	if u.br.CreateTimeout <= 0 {
		u.br.CreateTimeout = DefaultBatchCreateTimeout
	}
	u.budget = r.m.budgets.of(route, u.br.MaxEnqueuedTokens)
	return u, nil
}

// errKilled is what a test hook returns to stop the dispatch on the spot,
// as a kill would.
var errKilled = errors.New("jobs: stopped by the test hook")

func (u *upstream) hook(c *Chunk, step string) error {
	if h := u.r.m.cfg.BatchHook; h != nil {
		if h(c.JobID, c.Chunk, step) {
			return errKilled
		}
	}
	return nil
}

// main resumes the job's recorded chunks, then claims new ones until no
// task is pending and every chunk has ended (a chunk's tasks may come back
// for a new upstream batch until then).
func (u *upstream) main(ctx context.Context) {
	defer u.wg.Wait()
	defer close(u.quit)
	next, err := u.resumeChunks(ctx)
	if err != nil {
		u.r.logErr("resuming upstream batches", err)
		return
	}
	var carry []Task
	for ctx.Err() == nil {
		c, rest, err := u.claim(ctx, next, carry)
		carry = rest
		if err != nil {
			if !errors.Is(err, errKilled) && ctx.Err() == nil {
				u.r.logErr("claiming an upstream batch", err)
			}
			return
		}
		if c != nil {
			next++
			held := c.tasks
			c.tasks = nil
			u.start(ctx, c, held)
			continue
		}
		if len(carry) > 0 {
			continue
		}
		select {
		case ts := <-u.rebatch:
			carry = append(carry, ts...)
		case <-u.idleCh():
			return
		case <-ctx.Done():
			return
		}
	}
}

// resumeChunks drives the job's recorded chunks that have not ended again
// and returns the number of the next new chunk.
func (u *upstream) resumeChunks(ctx context.Context) (int, error) {
	chunks, err := u.cs.Chunks(ctx, u.r.id)
	if err != nil {
		return 0, err
	}
	next := 0
	for i := range chunks {
		c := chunks[i]
		next = c.Chunk + 1
		if c.Step == StepDone {
			continue
		}
		held, err := u.reclaim(ctx, &c)
		if err != nil {
			return 0, err
		}
		u.start(ctx, &c, held)
	}
	return next, nil
}

// taskPiece is how many of a chunk's tasks are read from the store at once.
const taskPiece = 1024

// reclaim holds a resumed chunk's tasks by this owner again (after a
// restart they went back to pending), before any new claim could take
// them into another chunk. It reads them in pieces and keeps them without
// their requests, as a new chunk keeps its tasks: a chunk of 50,000 tasks
// does not hold its input in memory. spool and measure read the requests
// again, piece by piece.
func (u *upstream) reclaim(ctx context.Context, c *Chunk) ([]Task, error) {
	held := make([]Task, 0, len(c.Seqs))
	err := u.eachTask(ctx, c.Seqs, func(t *Task) error {
		t.Request = nil
		held = append(held, *t)
		return nil
	})
	return held, err
}

// eachTask claims the job's tasks in seqs for this owner (those pending,
// and those it holds already) in pieces of taskPiece, and calls fn with
// each, its request read; a task that ended meanwhile is skipped.
func (u *upstream) eachTask(ctx context.Context, seqs []int64, fn func(*Task) error) error {
	for from := 0; from < len(seqs); from += taskPiece {
		ts, err := u.cs.ClaimSeqs(ctx, u.r.id, u.r.m.cfg.Owner, seqs[from:min(from+taskPiece, len(seqs))], u.r.m.cfg.Lease)
		if err != nil {
			return err
		}
		for i := range ts {
			if err := fn(&ts[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// seqsOf returns the tasks' Seqs.
func seqsOf(ts []Task) []int64 {
	out := make([]int64, len(ts))
	for i := range ts {
		out[i] = ts[i].Seq
	}
	return out
}

// start drives c on a goroutine of its own.
func (u *upstream) start(ctx context.Context, c *Chunk, held []Task) {
	u.mu.Lock()
	if u.active == 0 {
		u.idle = make(chan struct{})
	}
	u.active++
	u.mu.Unlock()
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer u.ended()
		u.resume(ctx, c, held)
	}()
}

func (u *upstream) ended() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.active--; u.active == 0 {
		close(u.idle)
	}
}

// idleCh is closed once no chunk is being driven.
func (u *upstream) idleCh() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.active == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return u.idle
}

// spoolPath is where a chunk's input file is written.
func (u *upstream) spoolPath(c *Chunk) string {
	return filepath.Join(u.r.m.Dir(u.r.job), fmt.Sprintf("upstream-%d.jsonl", c.Chunk))
}

// chunkWriter writes a new chunk's input file as its tasks come.
type chunkWriter struct {
	u      *upstream
	c      *Chunk
	enc    batchapi.Encoder
	size   int64
	full   bool
	online []Task
}

// add writes t into the chunk; false: the chunk is full (t is not in it).
// A task the batch API cannot take goes online.
func (w *chunkWriter) add(ctx context.Context, t *Task) bool {
	u, c := w.u, w.c
	req, ok := u.encodable(ctx, t)
	if !ok {
		w.online = append(w.online, *t)
		return true
	}
	mt := req.Req.Params.MaxTokens
	if mt <= 0 {
		mt = req.MaxTokens
	}
	lineMax := int64(len(t.Request)) + 512
	if lineMax > u.br.MaxBytes {
		w.online = append(w.online, *t) // alone it passes the limits
		return true
	}
	if len(c.Seqs) > 0 && (len(c.Seqs) >= u.br.MaxRequests || w.size+lineMax > u.br.MaxBytes ||
		(u.budget != nil && c.tokens+chunkTokens(int(lineMax), mt) > u.br.MaxEnqueuedTokens)) {
		w.full = true
		return false
	}
	n, err := w.enc.Encode(req)
	if err != nil {
		w.online = append(w.online, *t)
		return true
	}
	w.size += int64(n)
	c.tokens += chunkTokens(n, mt)
	c.Seqs = append(c.Seqs, t.Seq)
	c.tasks = append(c.tasks, *t)
	c.tasks[len(c.tasks)-1].Request = nil // written; a rewrite after a restart reads it again
	return true
}

// claim claims the tasks of a new chunk and writes its input file: tasks
// are claimed in pieces and written as they come, until the upstream
// batch's limits (requests, bytes, and the route's token budget); a task
// that would pass them is carried to the next chunk. It returns nil when
// no task is left.
func (u *upstream) claim(ctx context.Context, n int, carry []Task) (*Chunk, []Task, error) {
	c := &Chunk{JobID: u.r.id, Chunk: n, Route: u.route, Step: StepClaimed, FileName: fmt.Sprintf("batcher-%s-%d.jsonl", u.r.id, n)}
	f, err := os.Create(u.spoolPath(c))
	if err != nil {
		return nil, carry, err
	}
	defer func() { _ = f.Close() }()
	bw := bufio.NewWriterSize(f, 256<<10)
	w := &chunkWriter{u: u, c: c, enc: u.br.Upstream.NewEncoder(bw)}
	var rest []Task
	for i := range carry {
		if !w.add(ctx, &carry[i]) {
			rest = append(rest, carry[i:]...)
			break
		}
	}
	for !w.full && ctx.Err() == nil {
		want := min(1024, u.br.MaxRequests-len(c.Seqs))
		if want <= 0 {
			break
		}
		ts, err := u.r.m.cfg.Store.Claim(ctx, u.r.id, u.r.m.cfg.Owner, want, u.r.m.cfg.Lease)
		if err != nil {
			return nil, rest, err
		}
		for i := range ts {
			if w.full || !w.add(ctx, &ts[i]) {
				rest = append(rest, ts[i])
			}
		}
		if len(ts) < want {
			break
		}
	}
	if !w.full && len(c.Seqs) > 0 && u.br.Gather > 0 && ctx.Err() == nil {
		rest = u.gather(ctx, w, rest)
	}
	u.sendOnline(ctx, w.online)
	if err := bw.Flush(); err != nil {
		return nil, rest, err
	}
	if len(c.Seqs) == 0 {
		_ = os.Remove(u.spoolPath(c))
		return nil, rest, nil
	}
	if err := u.hook(c, "claimed"); err != nil {
		return nil, rest, err
	}
	return c, rest, u.cs.SaveChunk(ctx, c)
}

// gather waits up to the route's Gather for more tasks to fill a chunk the
// store left short: tasks coming back from other upstream batches
// (rebatch) and tasks released into the store later (a judge's), so that
// they go upstream in one batch rather than in several small ones. It
// stops early when the chunk is full or the job is ending.
func (u *upstream) gather(ctx context.Context, w *chunkWriter, rest []Task) []Task {
	end := time.NewTimer(u.br.Gather)
	defer end.Stop()
	poll := time.NewTicker(max(u.br.Gather/10, 10*time.Millisecond))
	defer poll.Stop()
	add := func(ts []Task) {
		for i := range ts {
			if w.full || !w.add(ctx, &ts[i]) {
				rest = append(rest, ts[i])
			}
		}
	}
	for !w.full {
		select {
		case ts := <-u.rebatch:
			add(ts)
		case <-poll.C:
			want := min(1024, u.br.MaxRequests-len(w.c.Seqs))
			if want <= 0 || u.ending() != endNone {
				return rest
			}
			ts, err := u.r.m.cfg.Store.Claim(ctx, u.r.id, u.r.m.cfg.Owner, want, u.r.m.cfg.Lease)
			if err != nil {
				u.r.logErr("claiming tasks to gather", err)
				return rest
			}
			add(ts)
		case <-end.C:
			return rest
		case <-ctx.Done():
			return rest
		}
	}
	return rest
}

// encodable builds a task's upstream request; false: it runs online (a
// judge, another route, or a request the batch API cannot take). Rich
// requests (tools, response formats, images, logprobs) go upstream too:
// the provider's output lines carry their answers whole.
func (u *upstream) encodable(ctx context.Context, t *Task) (*batchapi.Request, bool) {
	if t.Group == GroupJudge {
		return nil, false
	}
	f, req, err := u.r.request(ctx, t, "")
	if err != nil || f.model != u.route {
		return nil, false
	}
	return &batchapi.Request{CustomID: "t" + strconv.FormatInt(t.Seq, 10), Model: u.br.Model, Req: req,
		MaxTokens: u.r.m.defaultMaxTokens(u.route)}, true
}

func (u *upstream) sendOnline(ctx context.Context, ts []Task) {
	if len(ts) == 0 {
		return
	}
	select {
	case u.requeue <- ts:
		u.r.poke()
	case <-ctx.Done():
	}
}

// spool makes sure a chunk's input file holds exactly ts, writing it again
// when a restart lost it (or some of the chunk's tasks ended meanwhile):
// their requests are read from the store piece by piece (eachTask), never
// the whole chunk's at once. The file is written aside and renamed, so a
// kill leaves no half of one.
func (u *upstream) spool(ctx context.Context, c *Chunk, ts []Task) error {
	if _, err := os.Stat(u.spoolPath(c)); err == nil && len(ts) == len(c.Seqs) {
		return nil
	}
	tmp := u.spoolPath(c) + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	bw := bufio.NewWriterSize(f, 256<<10)
	enc := u.br.Upstream.NewEncoder(bw)
	err = u.eachTask(ctx, seqsOf(ts), func(t *Task) error {
		req, ok := u.encodable(ctx, t)
		if !ok {
			return fmt.Errorf("jobs: task %d of upstream batch %d no longer encodes", t.Seq, c.Chunk)
		}
		_, err := enc.Encode(req)
		return err
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, u.spoolPath(c))
}

// measure estimates what ts cost against the route's token budget, as
// claim does for a new chunk: a resumed chunk's tasks are read (piece by
// piece) and encoded again.
func (u *upstream) measure(ctx context.Context, ts []Task) int64 {
	var n int64
	enc := u.br.Upstream.NewEncoder(io.Discard)
	_ = u.eachTask(ctx, seqsOf(ts), func(t *Task) error {
		req, ok := u.encodable(ctx, t)
		if !ok {
			return nil
		}
		mt := req.Req.Params.MaxTokens
		if mt <= 0 {
			mt = req.MaxTokens
		}
		if w, err := enc.Encode(req); err == nil {
			n += chunkTokens(w, mt)
		}
		return nil
	})
	return n
}
