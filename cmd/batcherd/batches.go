package main

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/openaiapi"
)

// The OpenAI Batch API (openaiapi.NewBatches) over the durable jobs: this
// file adapts jobs.Manager to openaiapi.BatchJobs, each call in the
// caller's scope (jobsScope), and the manager's errors to the Batch API's
// kinds.

// batchesMount returns startHTTP's mount: the batch API over m, or nothing
// when jobs or the file store are off.
func batchesMount(m *jobs.Manager) func(*openaiapi.FileStore) []openaiapi.Option {
	return func(fs *openaiapi.FileStore) []openaiapi.Option {
		if m == nil || fs == nil {
			return nil
		}
		return []openaiapi.Option{openaiapi.WithBatches(openaiapi.NewBatches(batchJobs{m}, fs))}
	}
}

// batchJobs is jobs.Manager as openaiapi.BatchJobs.
type batchJobs struct{ m *jobs.Manager }

func (b batchJobs) Begin(ctx context.Context, meta, tags map[string]string, window time.Duration) (openaiapi.BatchCreator, error) {
	// The jobs' rule, which Begin applies too, named as the Batch API's
	// caller sent it: "metadata", not a job spec's "spec.metadata".
	if err := jobs.CheckMetadata("metadata", meta, openaiapi.BatchMaxMetadata); err != nil {
		return nil, batchErr(err)
	}
	c, err := b.m.Begin(jobsScope(ctx), jobs.Spec{Metadata: meta, Tags: tags, Kind: jobs.KindOpenAIBatch, CompletionWindow: window})
	if err != nil {
		return nil, batchErr(err)
	}
	return &batchCreator{c: c, b: b}, nil
}

func (b batchJobs) Get(ctx context.Context, id string) (*openaiapi.BatchJob, error) {
	j, err := b.m.Get(jobsScope(ctx), id)
	return b.job(j, err)
}

func (b batchJobs) Cancel(ctx context.Context, id string) (*openaiapi.BatchJob, error) {
	j, err := b.m.CancelUnended(jobsScope(ctx), id)
	return b.job(j, err)
}

func (b batchJobs) List(ctx context.Context, after string, limit int) ([]*openaiapi.BatchJob, error) {
	js, err := b.m.List(jobsScope(ctx), jobs.ListQuery{Kind: jobs.KindOpenAIBatch, After: after, Limit: limit})
	if err != nil {
		return nil, batchErr(err)
	}
	out := make([]*openaiapi.BatchJob, len(js))
	for i, j := range js {
		out[i] = b.batch(j)
	}
	return out, nil
}

func (b batchJobs) job(j *jobs.Job, err error) (*openaiapi.BatchJob, error) {
	if err != nil {
		return nil, batchErr(err)
	}
	return b.batch(j), nil
}

// batchStatus is each job state's batch status. A queued job that has
// not run yet is shown validating instead (batchJobStatus).
var batchStatus = map[jobs.State]string{
	jobs.StateValidating: openaiapi.BatchValidating, jobs.StateQueued: openaiapi.BatchInProgress,
	jobs.StateRunning: openaiapi.BatchInProgress, jobs.StateFinalizing: openaiapi.BatchFinalizing,
	jobs.StateCompleted: openaiapi.BatchCompleted, jobs.StateFailed: openaiapi.BatchFailed,
	jobs.StateCancelling: openaiapi.BatchCancelling, jobs.StateCancelled: openaiapi.BatchCancelled,
	jobs.StateExpired: openaiapi.BatchExpired,
}

// batchJobStatus is j's batch status. OpenAI's batches go validating,
// in_progress (in_progress_at: when they began to run), finalizing, then
// an end; a job queued behind others has its input validated but has not
// begun to run, so it stays validating until it first runs (StartedAt),
// and in_progress is never shown without in_progress_at.
func batchJobStatus(j *jobs.Job) string {
	s := batchStatus[j.State]
	if s == openaiapi.BatchInProgress && j.StartedAt.IsZero() {
		return openaiapi.BatchValidating
	}
	return s
}

// batch is j as the Batch API shows it.
func (b batchJobs) batch(j *jobs.Job) *openaiapi.BatchJob {
	out := &openaiapi.BatchJob{ID: j.ID, Tenant: j.Tenant, Metadata: j.Spec.Metadata, Status: batchJobStatus(j), Error: j.Error,
		Total: j.Counts.Total, Completed: j.Counts.Succeeded, Failed: j.Counts.Failed + j.Counts.Expired + j.Counts.Cancelled,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinalizingAt: j.FinalizingAt, CancellingAt: j.CancellingAt,
		Deadline: j.Deadline(), EndedAt: j.EndedAt}
	if j.State.Terminal() {
		dir := b.m.Dir(j)
		out.ResultsPath, out.ErrorsPath = filepath.Join(dir, jobs.ResultsFile), filepath.Join(dir, jobs.ErrorsFile)
	}
	return out
}

// batchCreator is a jobs.Creator as openaiapi.BatchCreator.
type batchCreator struct {
	c *jobs.Creator
	b batchJobs
}

func (c *batchCreator) AddLine(ctx context.Context, line []byte) error {
	return batchErr(c.c.AddLine(jobsScope(ctx), line))
}

func (c *batchCreator) AddInvalid(ctx context.Context, customID, msg string) error {
	return batchErr(c.c.AddInvalid(jobsScope(ctx), customID, msg))
}

func (c *batchCreator) Finish(ctx context.Context) (*openaiapi.BatchJob, error) {
	j, err := c.c.Finish(jobsScope(ctx))
	return c.b.job(j, err)
}

func (c *batchCreator) Abort() { c.c.Abort() }

// batchErr is a job manager's error as the Batch API's kind, with a
// message that names the cause as the caller sees it: jobs.Reason, without
// the jobs package's "jobs: " and the kind's own words, which the error's
// status and code already say.
// Any other error is returned as it is (the handler answers 500).
func batchErr(err error) error {
	if err == nil {
		return nil
	}
	be := &openaiapi.BatchError{Message: jobs.Message(err), Err: err}
	var qe *jobs.QuotaError
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		be.Kind = openaiapi.ErrBatchNotFound
	case errors.Is(err, batcher.ErrForbidden):
		be.Kind = openaiapi.ErrBatchForbidden
	case errors.As(err, &qe):
		// The tenant's own quota, named as the tenants file spells it.
		be.Kind, be.Message, be.RetryAfter = openaiapi.ErrBatchQuota, qe.Error(), qe.RetryAfter
		if qe.Quota == jobs.QuotaItemsPerJob {
			be.Kind = openaiapi.ErrBatchItemsQuota
		}
	case errors.Is(err, jobs.ErrEmpty):
		be.Kind, be.Message = openaiapi.ErrBatchInvalid, "the input file holds no requests"
	case errors.Is(err, jobs.ErrTooManyItems):
		be.Kind, be.Message = openaiapi.ErrBatchInvalid, "the input file has "+jobs.Reason(err)
	case errors.Is(err, jobs.ErrInvalid):
		be.Kind, be.Message = openaiapi.ErrBatchInvalid, jobs.Reason(err)
	case errors.Is(err, jobs.ErrEnded):
		be.Kind = openaiapi.ErrBatchEnded
	case errors.Is(err, jobs.ErrClosed):
		be.Kind, be.Message = openaiapi.ErrBatchClosed, "server shutting down: retry against another instance"
	default:
		return err
	}
	return be
}
