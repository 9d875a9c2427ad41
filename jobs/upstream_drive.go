package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
)

// resume takes a chunk from its recorded step to its end.
func (u *upstream) resume(ctx context.Context, c *Chunk, held []Task) {
	if err := u.drive(ctx, c, held); err != nil && !errors.Is(err, errKilled) && ctx.Err() == nil {
		u.r.logErr(fmt.Sprintf("upstream batch %d (%s)", c.Chunk, c.Step), err)
	}
}

// drive takes c through its steps. A step that fails for a while (the
// provider's 5xx or 429, a timeout, a connection reset) is tried again
// after a backoff from PollMin to PollMax with jitter (at least the
// provider's Retry-After): each step begins by looking for what an earlier
// try may have left upstream (FindFile, Find), so a retry neither uploads
// a file twice nor creates a batch twice.
func (u *upstream) drive(ctx context.Context, c *Chunk, held []Task) error {
	if len(held) == 0 {
		return u.save(ctx, c, StepDone)
	}
	defer u.dequeue(c)
	if c.Step == StepRunning {
		u.hold(ctx, c, held) // upstream already: it holds its tokens
	}
	wait := u.br.PollMin
	for c.Step != StepDone {
		err := u.step(ctx, c, held)
		if err == nil {
			wait = u.br.PollMin
			continue
		}
		if !transient(err) || ctx.Err() != nil {
			return err
		}
		d := retryWait(wait, err)
		u.r.logErr(fmt.Sprintf("upstream batch %d (%s), trying again in %v", c.Chunk, c.Step, d.Round(time.Millisecond)), err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, u.br.PollMax)
	}
	return nil
}

// transient reports whether a step's failure may pass: the provider's
// server errors and rate limits, timeouts and network failures.
func transient(err error) bool {
	if errors.Is(err, errKilled) || errors.Is(err, context.Canceled) {
		return false
	}
	switch batcher.ClassOf(err) {
	case batcher.ClassRateLimit, batcher.ClassTimeout, batcher.ClassNetwork, batcher.ClassServer:
		return true
	}
	return false
}

// retryWait is the wait before the next try: wait with up to 50% jitter,
// and at least what the provider asked (Retry-After).
func retryWait(wait time.Duration, err error) time.Duration {
	d := wait/2 + rand.N(wait/2+1)
	var ue *batcher.UpstreamError
	if errors.As(err, &ue) && ue.RateLimit != nil {
		d = max(d, ue.RateLimit.RetryAfter)
	}
	return d
}

func (u *upstream) save(ctx context.Context, c *Chunk, step Step) error {
	c.Step = step
	return u.cs.SaveChunk(ctx, c)
}

// step takes c one step further.
func (u *upstream) step(ctx context.Context, c *Chunk, held []Task) error {
	switch c.Step {
	case StepClaimed:
		if u.ending() != endNone {
			return u.endAll(ctx, c, held)
		}
		if !u.lim.Files {
			return u.save(ctx, c, StepCreating) // the create call takes the input
		}
		return u.save(ctx, c, StepUploading)
	case StepUploading:
		return u.upload(ctx, c, held)
	case StepCreating:
		return u.create(ctx, c, held)
	case StepRunning:
		b, err := u.poll(ctx, c)
		if err != nil {
			return err
		}
		u.cancelTwins(ctx, c)
		return u.collect(ctx, c, b, held)
	}
	return fmt.Errorf("jobs: upstream batch %d at an unknown step %v", c.Chunk, c.Step)
}

// upload uploads c's input file, unless an earlier try did (FindFile).
func (u *upstream) upload(ctx context.Context, c *Chunk, held []Task) error {
	up := u.br.Upstream
	f, err := up.FindFile(ctx, c.FileName)
	switch {
	case err == nil:
	case errors.Is(err, batchapi.ErrNotFound):
		if err := u.spool(ctx, c, held); err != nil {
			return err
		}
		if err := u.hook(c, "uploading"); err != nil {
			return err
		}
		sf, err := os.Open(u.spoolPath(c))
		if err != nil {
			return err
		}
		st, _ := sf.Stat()
		f, err = up.Upload(ctx, c.FileName, sf, st.Size())
		_ = sf.Close()
		if err != nil {
			return err
		}
		if err := u.hook(c, "uploaded"); err != nil {
			return err // the file is upstream, its id not recorded
		}
	default:
		return err
	}
	c.FileID = f.ID
	_ = os.Remove(u.spoolPath(c))
	dropRequests(held) // uploaded; what runs online again is read again
	return u.save(ctx, c, StepCreating)
}

// dropRequests forgets the tasks' requests, which the store keeps.
func dropRequests(ts []Task) {
	for i := range ts {
		ts[i].Request = nil
	}
}

// create creates c's upstream batch, unless an earlier try did
// (findCreated, after waitInFlight), once the route's token budget holds
// it. The job's creates take turns (createMu) from the look for an earlier
// batch to the record of the new one's id: a batch created while another
// create of the job was in flight would be ambiguous to findCreated.
func (u *upstream) create(ctx context.Context, c *Chunk, held []Task) error {
	if err := u.waitInFlight(ctx, c, held); err != nil {
		return err
	}
	u.createMu.Lock()
	defer u.createMu.Unlock()
	again := !c.CreateStarted.IsZero() // an earlier try began a create
	b, err := u.findCreated(ctx, c, held)
	if err != nil {
		return err
	}
	if b != nil {
		u.hold(ctx, c, held)
	} else {
		if err := u.enqueue(ctx, c, held); err != nil {
			return err
		}
		if u.ending() != endNone {
			u.dequeue(c)
			return u.endAll(ctx, c, held)
		}
		if b, err = u.createNew(ctx, c, held); err != nil {
			return err
		}
	}
	c.BatchID = b.ID
	u.observe(c, b)
	if !u.lim.Files {
		_ = os.Remove(u.spoolPath(c))
		dropRequests(held)
	}
	if err := u.save(ctx, c, StepRunning); err != nil {
		return err
	}
	if again {
		u.cancelTwins(ctx, c)
	}
	return nil
}

// createNew makes the create call, its start recorded first (a restart
// waits until the call can no longer be in flight before it creates again)
// and the call bounded by CreateTimeout.
func (u *upstream) createNew(ctx context.Context, c *Chunk, held []Task) (*batchapi.Batch, error) {
	req := &batchapi.CreateRequest{InputFileID: c.FileID, Endpoint: batchapi.Endpoint(u.op(held)), Metadata: u.chunkTags(c)}
	if !u.lim.Files {
		if err := u.spool(ctx, c, held); err != nil {
			return nil, err
		}
		f, err := os.Open(u.spoolPath(c))
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		req.Input = f
	}
	c.CreateStarted = u.createStart()
	if err := u.cs.SaveChunk(ctx, c); err != nil {
		return nil, err
	}
	if err := u.hook(c, "creating"); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, u.br.CreateTimeout)
	b, err := u.br.Upstream.Create(cctx, req)
	cancel()
	u.lastCreate = time.Now()
	if err != nil {
		u.dequeue(c)
		return nil, err
	}
	ri, _ := u.r.m.routeInfo(u.route)
	u.r.m.batchAPI.created(ri.Backend, u.route, len(c.Seqs))
	if err := u.hook(c, "created"); err != nil {
		return nil, err // the batch is upstream, its id not recorded
	}
	return b, nil
}

// createStart is the start of a create call to record: the store keeps
// milliseconds, so it waits, if need be, for a millisecond after the one
// in which the job's last create call returned. A batch that call made
// then falls before the new start, in the window findCreated gives the
// earlier chunk. The caller holds createMu.
func (u *upstream) createStart() time.Time {
	now := time.Now()
	if next := u.lastCreate.Truncate(time.Millisecond).Add(time.Millisecond); now.Before(next) {
		time.Sleep(time.Until(next))
		now = time.Now()
	}
	return now
}

// enqueue takes c's tokens of the route's budget, waiting for room; it
// fails, taking nothing, when ctx ends first.
func (u *upstream) enqueue(ctx context.Context, c *Chunk, held []Task) error {
	if u.budget == nil || c.enqueued > 0 {
		return nil
	}
	if err := u.budget.acquire(ctx, u.tokensOf(ctx, c, held)); err != nil {
		return err
	}
	c.enqueued = c.tokens
	return nil
}

// hold takes c's tokens of the route's budget at once, room or not: the
// batch is upstream already, so it holds them.
func (u *upstream) hold(ctx context.Context, c *Chunk, held []Task) {
	if u.budget == nil || c.enqueued > 0 {
		return
	}
	u.budget.take(u.tokensOf(ctx, c, held))
	c.enqueued = c.tokens
}

// tokensOf is what c costs against the route's budget, measured once.
func (u *upstream) tokensOf(ctx context.Context, c *Chunk, held []Task) int64 {
	if c.tokens == 0 {
		c.tokens = u.measure(ctx, held)
	}
	return c.tokens
}

// dequeue gives c's tokens back to the budget.
func (u *upstream) dequeue(c *Chunk) {
	u.budget.release(c.enqueued)
	c.enqueued = 0
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
// results; the rest (failed, expired, cancelled upstream, or missing) end
// cancelled or expired with the job, or go again (requeue).
func (u *upstream) collect(ctx context.Context, c *Chunk, b *batchapi.Batch, held []Task) error {
	idx := make(map[int64]int, len(held))
	for i := range held {
		idx[held[i].Seq] = i
	}
	got := make([]bool, len(held))
	// final: the provider answered the line with an error that another
	// try would meet again (a bad request): it runs online, where it ends.
	final := map[int64]bool{}
	var outs []Outcome
	flush := func() error {
		if len(outs) == 0 {
			return nil
		}
		if _, err := u.r.m.cfg.Store.Complete(ctx, u.r.id, u.r.m.cfg.Owner, outs); err != nil {
			return err
		}
		u.r.m.counts.recorded(outs)
		outs = outs[:0]
		u.r.poke()
		return nil
	}
	err := u.br.Upstream.Results(ctx, b, func(res *batchapi.Result) error {
		seq, err := strconv.ParseInt(strings.TrimPrefix(res.CustomID, "t"), 10, 64)
		i, ok := idx[seq]
		if err != nil || !ok || got[i] {
			return nil // not ours, or twice
		}
		if res.Outcome != batchapi.Succeeded {
			if res.Outcome == batchapi.Failed && !transient(res.Resp.Err) {
				final[seq] = true
			}
			return nil // not answered: handled below
		}
		got[i] = true
		f := &inflight{task: held[i], model: u.route}
		rp := &res.Resp
		// The batch's size is the requests its file carried, as an online
		// result's is the requests of its batch.
		o := u.r.outcome(f, batcher.Result{Text: rp.Text, Embedding: rp.Embedding, FinishReason: rp.FinishReason,
			Chat: rp.Chat, Usage: rp.Usage, Attempts: 1, BatchID: b.ID, BatchSize: len(c.Seqs), Backend: backendBatchAPI})
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
	if len(rest) > 0 && u.ending() != endNone {
		return u.endAll(ctx, c, rest)
	}
	// Done first: a kill from here on leaves the rest pending (their
	// lease lapses), for a new claim; never in two chunks.
	if err := u.save(ctx, c, StepDone); err != nil {
		return err
	}
	u.dequeue(c)
	u.again(ctx, rest, final)
	return nil
}

// again sends tasks the upstream did not answer on: to a new upstream
// batch while the job's deadline leaves the provider's whole window (and
// the task has been in fewer than maxUpstreamTries), online otherwise, and
// online at once when the provider's answer was final.
func (u *upstream) again(ctx context.Context, rest []Task, final map[int64]bool) {
	var batch, online []Task
	allow := windowAllows(u.r.job.Deadline(), u.lim.Window, time.Now())
	u.mu.Lock()
	for _, t := range rest {
		if allow && !final[t.Seq] && u.tries[t.Seq] < maxUpstreamTries-1 {
			u.tries[t.Seq]++
			batch = append(batch, t)
		} else {
			online = append(online, t)
		}
	}
	u.mu.Unlock()
	u.sendOnline(ctx, online)
	if len(batch) == 0 {
		return
	}
	select {
	case u.rebatch <- batch:
	case <-u.quit: // main has stopped: the tasks' leases lapse, a restart claims them
	case <-ctx.Done():
	}
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
	return u.save(ctx, c, StepDone)
}
