package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
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
	// upstream batch smaller than MaxRequests (only judge tasks released
	// later can add to one today). Default 0.
	Gather time.Duration
	// PollMin and PollMax bound the backoff between two looks at a batch
	// upstream. Defaults DefaultBatchPollMin and DefaultBatchPollMax.
	PollMin, PollMax time.Duration
}

// batchRoute returns the batch API a job dispatches to, or nil when it
// runs online.
func (m *Manager) batchRoute(s *Spec) (*BatchRoute, string) {
	br, ok := m.cfg.BatchRoutes[s.Model]
	if !ok || br.Upstream == nil {
		return nil, ""
	}
	switch s.Dispatch {
	case DispatchBatchAPI:
	case DispatchAuto:
		if s.CompletionWindow > 0 && s.CompletionWindow < br.Upstream.Limits().Window {
			return nil, ""
		}
	default:
		return nil, ""
	}
	return &br, s.Model
}

// validateDispatch checks spec.dispatch.
func (m *Manager) validateDispatch(s *Spec) error {
	switch s.Dispatch {
	case "", DispatchOnline, DispatchAuto:
		return nil
	case DispatchBatchAPI:
		if br, ok := m.cfg.BatchRoutes[s.Model]; !ok || br.Upstream == nil {
			return fmt.Errorf("%w: spec.dispatch: batch_api needs spec.model to name a route with batch_api enabled, got %q", ErrInvalid, cut(s.Model))
		}
		return nil
	}
	return fmt.Errorf("%w: spec.dispatch: online, batch_api or auto, got %q", ErrInvalid, cut(s.Dispatch))
}

// upstream dispatches one job's tasks through a batch API: it claims them
// in chunks of at most an upstream batch, writes each chunk's input to a
// spool file as it streams the tasks, uploads it, creates the batch, polls
// it, and records the results through the store. Every id is recorded
// (Chunk) before the next step, so that another run resumes where this
// one stopped. It runs on goroutines of its own beside the run's loop;
// tasks the upstream failed it hands to the loop to run online (requeue).
type upstream struct {
	r     *run
	br    BatchRoute
	route string
	lim   batchapi.Limits
	cs    ChunkStore
	// requeue takes tasks to the run's loop, which runs them online.
	requeue chan []Task
	wg      sync.WaitGroup
}

func newUpstream(r *run, br *BatchRoute, route string) (*upstream, error) {
	cs, ok := r.m.cfg.Store.(ChunkStore)
	if !ok {
		return nil, errors.New("jobs: the store cannot keep upstream batches (ChunkStore)")
	}
	u := &upstream{r: r, br: *br, route: route, lim: br.Upstream.Limits(), cs: cs, requeue: make(chan []Task, 16)}
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
// task is pending.
func (u *upstream) main(ctx context.Context) {
	defer u.wg.Wait()
	chunks, err := u.cs.Chunks(ctx, u.r.id)
	if err != nil {
		u.r.logErr("reading upstream batches", err)
		return
	}
	next := 0
	for i := range chunks {
		c := chunks[i]
		next = c.Chunk + 1
		if c.Step == StepDone {
			continue
		}
		// The chunk's tasks, held by this owner again (after a restart
		// they went back to pending), before any new claim could take
		// them into another chunk.
		held, err := u.cs.ClaimSeqs(ctx, u.r.id, u.r.m.cfg.Owner, c.Seqs, u.r.m.cfg.Lease)
		if err != nil {
			u.r.logErr("resuming upstream batches", err)
			return
		}
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			u.resume(ctx, &c, held)
		}()
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
		if c == nil {
			return
		}
		next++
		held := c.tasks
		c.tasks = nil
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			u.resume(ctx, c, held)
		}()
	}
}

// spoolPath is where a chunk's input file is written.
func (u *upstream) spoolPath(c *Chunk) string {
	return filepath.Join(u.r.m.Dir(u.r.job), fmt.Sprintf("upstream-%d.jsonl", c.Chunk))
}

// claim claims the tasks of a new chunk and writes its input file: tasks
// are claimed in pieces and written as they come, until the upstream
// batch's limits; a task that would pass them is carried to the next
// chunk. It returns nil when no task is left.
func (u *upstream) claim(ctx context.Context, n int, carry []Task) (*Chunk, []Task, error) {
	c := &Chunk{JobID: u.r.id, Chunk: n, Route: u.route, Step: StepClaimed, FileName: fmt.Sprintf("batcher-%s-%d.jsonl", u.r.id, n)}
	f, err := os.Create(u.spoolPath(c))
	if err != nil {
		return nil, carry, err
	}
	defer func() { _ = f.Close() }()
	bw := bufio.NewWriterSize(f, 256<<10)
	enc := u.br.Upstream.NewEncoder(bw)
	var size int64
	var online []Task
	full := false
	add := func(t *Task) bool {
		req, ok := u.encodable(ctx, t)
		if !ok {
			online = append(online, *t)
			return true
		}
		if len(c.Seqs) >= u.br.MaxRequests || size+int64(len(t.Request))+512 > u.br.MaxBytes {
			full = true
			return false
		}
		w, err := enc.Encode(req)
		if err != nil {
			online = append(online, *t)
			return true
		}
		size += int64(w)
		c.Seqs = append(c.Seqs, t.Seq)
		c.tasks = append(c.tasks, *t)
		c.tasks[len(c.tasks)-1].Request = nil // written; a rewrite after a restart reads it again
		return true
	}
	var rest []Task
	for i := range carry {
		if !add(&carry[i]) {
			rest = append(rest, carry[i:]...)
			break
		}
	}
	for !full && ctx.Err() == nil {
		want := min(1024, u.br.MaxRequests-len(c.Seqs))
		if want <= 0 {
			break
		}
		ts, err := u.r.m.cfg.Store.Claim(ctx, u.r.id, u.r.m.cfg.Owner, want, u.r.m.cfg.Lease)
		if err != nil {
			return nil, rest, err
		}
		for i := range ts {
			if full || !add(&ts[i]) {
				rest = append(rest, ts[i])
			}
		}
		if len(ts) < want {
			break
		}
	}
	u.sendOnline(ctx, online)
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

// encodable builds a task's upstream request; false: it runs online (a
// judge, another route, or a request the batch API cannot take).
func (u *upstream) encodable(ctx context.Context, t *Task) (*batchapi.Request, bool) {
	if t.Group == GroupJudge {
		return nil, false
	}
	f, req, err := u.r.request(ctx, t, "")
	if err != nil || f.model != u.route || req.Rich() {
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

// rewrite writes a chunk's input file again from its tasks, after a
// restart lost it before the upload.
func (u *upstream) rewrite(ctx context.Context, c *Chunk, ts []Task) error {
	f, err := os.Create(u.spoolPath(c))
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	bw := bufio.NewWriterSize(f, 256<<10)
	enc := u.br.Upstream.NewEncoder(bw)
	for i := range ts {
		req, ok := u.encodable(ctx, &ts[i])
		if !ok {
			return fmt.Errorf("jobs: task %d of upstream batch %d no longer encodes", ts[i].Seq, c.Chunk)
		}
		if _, err := enc.Encode(req); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// resume takes a chunk from its recorded step to its end.
func (u *upstream) resume(ctx context.Context, c *Chunk, held []Task) {
	if err := u.drive(ctx, c, held); err != nil && !errors.Is(err, errKilled) && ctx.Err() == nil {
		u.r.logErr(fmt.Sprintf("upstream batch %d (%s)", c.Chunk, c.Step), err)
	}
}

func (u *upstream) drive(ctx context.Context, c *Chunk, held []Task) error {
	up := u.br.Upstream
	save := func(step Step) error {
		c.Step = step
		return u.cs.SaveChunk(ctx, c)
	}
	if len(held) == 0 {
		return save(StepDone)
	}
	if c.Step == StepClaimed {
		if u.ending() != endNone {
			return u.endAll(ctx, c, held)
		}
		if err := save(StepUploading); err != nil {
			return err
		}
	}
	if c.Step == StepUploading {
		f, err := up.FindFile(ctx, c.FileName)
		switch {
		case err == nil:
			c.FileID = f.ID
		case errors.Is(err, batchapi.ErrNotFound):
			if _, serr := os.Stat(u.spoolPath(c)); serr != nil || len(held) != len(c.Seqs) {
				if err := u.rewrite(ctx, c, held); err != nil {
					return err
				}
			}
			if err := u.hook(c, "uploading"); err != nil {
				return err
			}
			sf, err := os.Open(u.spoolPath(c))
			if err != nil {
				return err
			}
			st, _ := sf.Stat()
			f, err := up.Upload(ctx, c.FileName, sf, st.Size())
			_ = sf.Close()
			if err != nil {
				return err
			}
			c.FileID = f.ID
			if err := u.hook(c, "uploaded"); err != nil {
				return err // the file is upstream, its id not recorded
			}
		default:
			return err
		}
		_ = os.Remove(u.spoolPath(c))
		for i := range held {
			held[i].Request = nil // uploaded; what runs online again is read again
		}
		if err := save(StepCreating); err != nil {
			return err
		}
	}
	tags := map[string]string{"batcher_job_id": u.r.id, "batcher_chunk": strconv.Itoa(c.Chunk)}
	if c.Step == StepCreating {
		b, err := up.Find(ctx, tags, u.lim.Window+time.Hour)
		switch {
		case err == nil:
		case errors.Is(err, batchapi.ErrNotFound):
			if u.ending() != endNone {
				return u.endAll(ctx, c, held)
			}
			b, err = up.Create(ctx, &batchapi.CreateRequest{InputFileID: c.FileID, Endpoint: batchapi.Endpoint(u.op(held)), Metadata: tags})
			if err != nil {
				return err
			}
			if err := u.hook(c, "created"); err != nil {
				return err // the batch is upstream, its id not recorded
			}
		default:
			return err
		}
		c.BatchID = b.ID
		u.observe(c, b)
		if err := save(StepRunning); err != nil {
			return err
		}
	}
	if c.Step != StepRunning {
		return nil
	}
	b, err := u.poll(ctx, c)
	if err != nil {
		return err
	}
	return u.collect(ctx, c, b, held)
}

// op is the operation of a chunk's tasks (all of one route).
func (u *upstream) op([]Task) batcher.Operation {
	op, _ := u.r.m.route(u.route)
	return op
}

func (u *upstream) observe(c *Chunk, b *batchapi.Batch) {
	c.Status, c.Total, c.Completed, c.Failed = string(b.Status), b.Counts.Total, b.Counts.Completed, b.Counts.Failed
	c.ETA = b.ETA(time.Now())
}

// ending reads the run's ending: cancelled, expired, or none.
func (u *upstream) ending() ending {
	j, err := u.r.m.cfg.Store.GetJob(context.Background(), u.r.id)
	if err != nil {
		return endNone
	}
	switch {
	case j.State == StateCancelling || j.State == StateCancelled:
		return endCancel
	case !j.Deadline().IsZero() && !time.Now().Before(j.Deadline()):
		return endExpire
	}
	return endNone
}

// poll looks at the batch with backoff until it is terminal, passing the
// job's cancel or expiry on to it.
func (u *upstream) poll(ctx context.Context, c *Chunk) (*batchapi.Batch, error) {
	up := u.br.Upstream
	wait := u.br.PollMin
	cancelled := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		if err := u.hook(c, "polling"); err != nil {
			return nil, err
		}
		b, err := up.Get(ctx, c.BatchID)
		if err != nil {
			u.r.logErr("polling upstream batch "+c.BatchID, err)
		} else {
			u.observe(c, b)
			if err := u.cs.SaveChunk(ctx, c); err != nil {
				return nil, err
			}
			u.r.m.notify(u.r.id)
			if b.Status.Terminal() {
				return b, nil
			}
			if !cancelled && u.ending() != endNone {
				if _, err := up.Cancel(ctx, c.BatchID); err != nil {
					u.r.logErr("cancelling upstream batch "+c.BatchID, err)
				} else {
					cancelled = true
					wait = u.br.PollMin
				}
			}
		}
		t.Reset(wait)
		wait = min(wait*3/2, u.br.PollMax)
	}
}

// collect records a terminal batch's results: answers as the tasks'
// results, the rest (failed, expired, cancelled upstream, or missing) run
// online, or end cancelled or expired with the job.
func (u *upstream) collect(ctx context.Context, c *Chunk, b *batchapi.Batch, held []Task) error {
	idx := make(map[int64]int, len(held))
	for i := range held {
		idx[held[i].Seq] = i
	}
	got := make([]bool, len(held))
	var outs []Outcome
	flush := func() error {
		if len(outs) == 0 {
			return nil
		}
		if _, err := u.r.m.cfg.Store.Complete(ctx, u.r.id, u.r.m.cfg.Owner, outs); err != nil {
			return err
		}
		u.r.m.cost.recorded(outs)
		outs = outs[:0]
		u.r.poke()
		return nil
	}
	err := u.br.Upstream.Results(ctx, b, func(res *batchapi.Result) error {
		seq, err := strconv.ParseInt(strings.TrimPrefix(res.CustomID, "t"), 10, 64)
		i, ok := idx[seq]
		if err != nil || !ok || got[i] || res.Outcome != batchapi.Succeeded {
			return nil // not ours, twice, or not answered: handled below
		}
		got[i] = true
		f := &inflight{task: held[i], model: u.route}
		o := u.r.outcome(f, batcher.Result{Text: res.Resp.Text, Embedding: res.Resp.Embedding, FinishReason: res.Resp.FinishReason,
			Usage: res.Resp.Usage, Attempts: 1, BatchID: b.ID, Backend: "batch_api"})
		outs = append(outs, o)
		if len(outs) >= 1024 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return err
	}
	var restSeqs []int64
	for i := range held {
		if !got[i] {
			restSeqs = append(restSeqs, held[i].Seq)
		}
	}
	// Read again with their requests, which the chunk does not keep.
	rest, err := u.cs.ClaimSeqs(ctx, u.r.id, u.r.m.cfg.Owner, restSeqs, u.r.m.cfg.Lease)
	if err != nil {
		return err
	}
	if err := u.hook(c, "collected"); err != nil {
		return err
	}
	if len(rest) > 0 {
		if e := u.ending(); e != endNone {
			if err := u.endAll(ctx, c, rest); err != nil {
				return err
			}
		} else {
			u.sendOnline(ctx, rest)
		}
	}
	c.Step = StepDone
	return u.cs.SaveChunk(ctx, c)
}

// endAll ends a chunk's tasks with the job: cancelled or expired.
func (u *upstream) endAll(ctx context.Context, c *Chunk, ts []Task) error {
	e := u.ending()
	outs := make([]Outcome, 0, len(ts))
	for i := range ts {
		f := &inflight{task: ts[i], model: u.route}
		var o Outcome
		if e == endExpire {
			o = u.r.outcomeAs(f, ItemExpired)
		} else {
			o = u.r.outcomeAs(f, ItemCancelled)
		}
		outs = append(outs, o)
	}
	if _, err := u.r.m.cfg.Store.Complete(ctx, u.r.id, u.r.m.cfg.Owner, outs); err != nil {
		return err
	}
	u.r.poke()
	c.Step = StepDone
	return u.cs.SaveChunk(ctx, c)
}
