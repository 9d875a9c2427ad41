package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
)

// JobService serves batcher.v1.JobService over a *jobs.Manager. It only
// translates: the manager owns the jobs.
type JobService struct {
	batcherv1.UnimplementedJobServiceServer
	m     *jobs.Manager
	log   *slog.Logger
	scope func(context.Context) context.Context
}

// NewJobService returns the JobService of m.
func NewJobService(m *jobs.Manager, log *slog.Logger) *JobService {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &JobService{m: m, log: log, scope: func(ctx context.Context) context.Context { return ctx }}
}

// WithScope sets how a call's context is scoped before it reaches the
// manager: batcherd passes the caller's tenant, from the authentication
// interceptor, as jobs.WithTenant, so that each tenant sees only its jobs
// and is held to its quotas. Without it every call is unscoped (one
// tenant). It returns s; call it before Register.
func (s *JobService) WithScope(scope func(context.Context) context.Context) *JobService {
	s.scope = scope
	return s
}

// Register registers the service on gs.
func (s *JobService) Register(gs *grpc.Server) { batcherv1.RegisterJobServiceServer(gs, s) }

// jobsStatus is where errors of the jobs package become gRPC statuses.
func (s *JobService) jobsStatus(err error) error {
	msg := jobs.Message(err)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return status.Error(codes.NotFound, msg)
	case errors.Is(err, jobs.ErrInvalid), errors.Is(err, jobs.ErrEmpty):
		// The code says invalid: the message starts with the field at fault.
		return status.Error(codes.InvalidArgument, jobs.Reason(err))
	case errors.Is(err, batcher.ErrForbidden):
		// The message names the field or line, and the route or priority
		// the tenant may not use (batcher.AccessError).
		return status.Error(codes.PermissionDenied, msg)
	case errors.Is(err, jobs.ErrQuota):
		return quotaStatus(err, msg)
	case errors.Is(err, jobs.ErrTooManyItems):
		return status.Error(codes.ResourceExhausted, msg)
	case errors.Is(err, jobs.ErrConflict):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, jobs.ErrClosed):
		return status.Error(codes.Unavailable, "server shutting down")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	s.log.Error("jobs: internal error", "err", err)
	return status.Error(codes.Internal, "internal error")
}

// JobsQuotaRetryDelay is the RetryInfo delay sent when a tenant is at its
// jobs quota: jobs.QuotaRetryAfter.
const JobsQuotaRetryDelay = jobs.QuotaRetryAfter

// quotaStatus is RESOURCE_EXHAUSTED naming the quota in a QuotaFailure.
// The jobs quota frees as the tenant's jobs end, so it carries a
// RetryInfo; a job over the items_per_job quota would be refused again,
// so it carries none.
func quotaStatus(err error, msg string) error {
	quota := "jobs"
	if errors.Is(err, jobs.ErrTooManyItems) {
		quota = "items_per_job"
	}
	st := status.New(codes.ResourceExhausted, msg)
	if d, derr := st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
		{Subject: "tenant", Description: quota + " quota: " + msg}}}); derr == nil {
		st = d
	}
	if quota == "jobs" {
		st = withRetry(st, JobsQuotaRetryDelay)
	}
	return st.Err()
}

func (s *JobService) CreateJob(stream grpc.ClientStreamingServer[batcherv1.CreateJobRequest, batcherv1.CreateJobResponse]) error {
	ctx := s.scope(stream.Context())
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "spec: the first message must be a JobSpec")
	}
	if err != nil {
		return err
	}
	ps := first.GetSpec()
	if ps == nil {
		return status.Error(codes.InvalidArgument, "spec: the first message must be a JobSpec")
	}
	spec, st := specToJobs(ps)
	if st != nil {
		return st.Err()
	}
	c, err := s.m.Begin(ctx, spec)
	if err != nil {
		return s.jobsStatus(err)
	}
	fail := func(err error) error {
		c.Abort()
		return err
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		items := msg.GetItems()
		if items == nil {
			return fail(status.Error(codes.InvalidArgument, "items: every message after the spec must carry items"))
		}
		for _, pr := range items.GetRequests() {
			if err := s.addRequest(ctx, c, pr); err != nil {
				return fail(s.jobsStatus(err))
			}
		}
		for _, l := range items.GetOpenaiLines() {
			if err := c.AddLine(ctx, l.GetLine()); err != nil {
				return fail(s.jobsStatus(err))
			}
		}
	}
	j, err := c.Finish(ctx)
	if err != nil {
		return s.jobsStatus(err)
	}
	items, invalid := c.Items()
	return stream.SendAndClose(&batcherv1.CreateJobResponse{Job: s.job(j, nil), Accepted: items - invalid, Invalid: invalid})
}

func (s *JobService) addRequest(ctx context.Context, c *jobs.Creator, pr *batcherv1.Request) error {
	c.NextIsRequest() // named by its index, not a batch file's line
	var r batcher.Request
	if st := toCore(pr, &r); st != nil {
		return c.AddInvalid(ctx, pr.GetId(), st.Message())
	}
	if field, why := jobItemOnly(pr); field != "" {
		return c.AddInvalid(ctx, pr.GetId(), field+": "+why)
	}
	o := r.ChatOptions()
	return c.Add(ctx, r.ID, &jobs.ItemRequest{Model: r.Route, Input: r.Input, Params: r.Params, Metadata: r.Metadata,
		Tools: o.Tools, ToolChoice: o.ToolChoice, ParallelToolCalls: o.ParallelToolCalls, ResponseFormat: o.ResponseFormat,
		User: o.User, Extra: o.Extra})
}

// jobItemOnly names a field of a job's item that a job does not take from
// its items, and why, or returns "": an item is never stripped of what
// its caller sent in silence. The job's spec sets these for every item.
func jobItemOnly(pr *batcherv1.Request) (field, why string) {
	switch {
	case pr.GetPriority() != batcherv1.Priority_PRIORITY_UNSPECIFIED:
		return "priority", "a job's items run at the job's priority (spec.priority); leave it unset"
	case pr.GetTimeout() != nil:
		return "timeout", "a job's items are bounded by the job's completion_window (spec.completion_window); leave it unset"
	case pr.GetStream():
		return "stream", "a job's answers are stored, not streamed; leave it false"
	case pr.GetDedup() != batcherv1.Dedup_DEDUP_UNSPECIFIED:
		return "dedup", "a job's items are deduplicated by the route's rules; leave it unset"
	case pr.GetCache() != batcherv1.CacheMode_CACHE_MODE_UNSPECIFIED:
		return "cache", "a job's items use the cache by the route's rules; leave it unset"
	case pr.GetTraceparent() != "" || pr.GetTracestate() != "":
		return "traceparent", "a job's items carry no trace context of their own; leave it unset"
	}
	return "", ""
}

// specToJobs translates a spec, naming a bad field.
func specToJobs(ps *batcherv1.JobSpec) (jobs.Spec, *status.Status) {
	s := jobs.Spec{Name: ps.GetName(), Metadata: ps.GetMetadata(), Model: ps.GetModel(),
		ConcurrentRequests: int(ps.GetConcurrentRequests()), FailOnInvalid: ps.GetFailOnInvalid(),
		RPM: int(ps.GetRequestsPerMinute()), TPM: ps.GetTokensPerMinute(), OutputDir: ps.GetOutputDir(),
		Dispatch: ps.GetDispatch()}
	var st *status.Status
	if s.Params, st = paramsToCore(ps.GetParams(), "spec.params"); st != nil {
		return s, st
	}
	switch p := ps.GetPriority(); p {
	case batcherv1.Priority_PRIORITY_UNSPECIFIED, batcherv1.Priority_PRIORITY_DEFERRABLE:
		s.Priority = batcher.PriorityDeferrable
	case batcherv1.Priority_PRIORITY_LOW:
		s.Priority = batcher.PriorityLow
	default:
		return s, invalidArgument("spec.priority", "must be PRIORITY_LOW or PRIORITY_DEFERRABLE, got "+p.String())
	}
	if ps.MaxRetries != nil {
		n := int(ps.GetMaxRetries())
		s.MaxRetries = &n
	}
	if st := durationsToCore("spec.", []protoDuration{{"retry_delay", ps.GetRetryDelay(), &s.RetryDelay},
		{"completion_window", ps.GetCompletionWindow(), &s.CompletionWindow}}); st != nil {
		return s, st
	}
	for i, g := range ps.GetRunGroups() {
		jg := jobs.Group{Name: g.GetName(), Model: g.GetModel(), Runs: int(g.GetRuns()), Seeds: g.GetSeeds(), NextModel: g.GetNextModel(),
			BackoffFactor: g.GetBackoffFactor()}
		if g.Temperature != nil {
			t := g.GetTemperature()
			jg.Temperature = &t
		}
		if g.MaxRetries != nil {
			n := int(g.GetMaxRetries())
			jg.MaxRetries = &n
		}
		if st := durationsToCore(fmt.Sprintf("spec.run_groups[%d].", i), []protoDuration{{"delay", g.GetDelay(), &jg.Delay},
			{"retry_delay", g.GetRetryDelay(), &jg.RetryDelay}}); st != nil {
			return s, st
		}
		s.Groups = append(s.Groups, jg)
	}
	if jd := ps.GetJudge(); jd != nil {
		s.Judge = &jobs.Judge{Model: jd.GetModel(), PromptTemplate: jd.GetPromptTemplate()}
		if s.Judge.Params, st = paramsToCore(jd.GetParams(), "spec.judge.params"); st != nil {
			return s, st
		}
	}
	return s, nil
}

// protoDuration is a duration field of a spec and where it goes.
type protoDuration struct {
	field string
	pd    *durationpb.Duration
	dst   *time.Duration
}

// durationsToCore converts set durations, which must be positive, naming
// the field (prefix+field) of a bad one.
func durationsToCore(prefix string, ds []protoDuration) *status.Status {
	for _, d := range ds {
		if d.pd == nil {
			continue
		}
		if err := d.pd.CheckValid(); err != nil {
			return invalidArgument(prefix+d.field, "invalid duration")
		}
		*d.dst = d.pd.AsDuration()
		if *d.dst <= 0 {
			return invalidArgument(prefix+d.field, "must be positive, got "+d.dst.String())
		}
	}
	return nil
}

func paramsToCore(p *batcherv1.GenerationParams, field string) (batcher.Params, *status.Status) {
	var out batcher.Params
	if p == nil {
		return out, nil
	}
	if p.MaxTokens != nil {
		if *p.MaxTokens < 1 {
			return out, invalidArgument(field+".max_tokens", "must be at least 1, got "+strconv.Itoa(int(*p.MaxTokens)))
		}
		out.MaxTokens = *p.MaxTokens
	}
	out.Temperature, out.TopP, out.Stop, out.Seed = p.Temperature, p.TopP, p.Stop, p.Seed
	// A spec's defaults are the five plain parameters; the others would be
	// dropped (mergeParams fills only these), so they are refused by name.
	for _, x := range [...]struct {
		name string
		set  bool
	}{{"presence_penalty", p.PresencePenalty != nil}, {"frequency_penalty", p.FrequencyPenalty != nil}, {"n", p.N != nil},
		{"logit_bias", len(p.LogitBias) > 0}, {"logprobs", p.Logprobs}, {"top_logprobs", p.TopLogprobs != nil},
		{"reasoning_effort", p.ReasoningEffort != ""}} {
		if x.set {
			return out, invalidArgument(field+"."+x.name, "not taken as a job's default: set it on each item")
		}
	}
	return out, nil
}

func paramsToProto(p batcher.Params) *batcherv1.GenerationParams {
	out := &batcherv1.GenerationParams{Temperature: p.Temperature, TopP: p.TopP, Stop: p.Stop, Seed: p.Seed}
	if p.MaxTokens > 0 {
		out.MaxTokens = &p.MaxTokens
	}
	return out
}

func specToProto(s *jobs.Spec) *batcherv1.JobSpec {
	ps := &batcherv1.JobSpec{Name: s.Name, Metadata: s.Metadata, Model: s.Model, Params: paramsToProto(s.Params),
		Priority: batcherv1.Priority_PRIORITY_DEFERRABLE, ConcurrentRequests: int32(s.ConcurrentRequests), FailOnInvalid: s.FailOnInvalid,
		RequestsPerMinute: int32(s.RPM), TokensPerMinute: s.TPM, OutputDir: s.OutputDir, Dispatch: s.Dispatch}
	if s.Priority == batcher.PriorityLow {
		ps.Priority = batcherv1.Priority_PRIORITY_LOW
	}
	if s.MaxRetries != nil {
		n := int32(*s.MaxRetries)
		ps.MaxRetries = &n
	}
	if s.RetryDelay > 0 {
		ps.RetryDelay = durationpb.New(s.RetryDelay)
	}
	if s.CompletionWindow > 0 {
		ps.CompletionWindow = durationpb.New(s.CompletionWindow)
	}
	for _, g := range s.Groups {
		pg := &batcherv1.RunGroup{Name: g.Name, Model: g.Model, Runs: int32(g.Runs),
			Temperature: g.Temperature, Seeds: g.Seeds, NextModel: g.NextModel, BackoffFactor: g.BackoffFactor}
		if g.MaxRetries != nil {
			n := int32(*g.MaxRetries)
			pg.MaxRetries = &n
		}
		if g.Delay > 0 {
			pg.Delay = durationpb.New(g.Delay)
		}
		if g.RetryDelay > 0 {
			pg.RetryDelay = durationpb.New(g.RetryDelay)
		}
		ps.RunGroups = append(ps.RunGroups, pg)
	}
	if jd := s.Judge; jd != nil {
		ps.Judge = &batcherv1.Judge{Model: jd.Model, PromptTemplate: jd.PromptTemplate, Params: paramsToProto(jd.Params)}
	}
	return ps
}

func countsToProto(c jobs.Counts) *batcherv1.JobCounts {
	return &batcherv1.JobCounts{Total: c.Total, Pending: c.Pending, Running: c.Running, Succeeded: c.Succeeded,
		Failed: c.Failed, Cancelled: c.Cancelled, Expired: c.Expired}
}

// The job states share their numbers with the proto's.
func stateToProto(s jobs.State) batcherv1.JobState { return batcherv1.JobState(s) }

func progressToProto(p *jobs.Progress) *batcherv1.JobProgress {
	out := &batcherv1.JobProgress{State: stateToProto(p.State), Counts: countsToProto(p.Counts), SuccessRate: p.SuccessRate,
		TokensIn: p.TokensIn, TokensOut: p.TokensOut, TokensPerSecond: p.TokensPerS, ItemsPerHour: p.ItemsPerH,
		Elapsed: durationpb.New(p.Elapsed), Time: timestamppb.New(p.Time), CostUsd: p.Cost, SavingUsd: p.Saving}
	if p.ETA >= 0 {
		out.Eta = durationpb.New(p.ETA)
	}
	if u := p.Upstream; u != nil {
		out.UpstreamItems, out.UpstreamBatches = u.Items, u.Batches
		if u.ETA >= 0 {
			out.UpstreamEta = durationpb.New(u.ETA)
		}
	}
	for name, c := range p.Groups {
		out.Groups = append(out.Groups, &batcherv1.GroupProgress{Group: name, Counts: countsToProto(c)})
	}
	// Map order is random: sort by name for stable output.
	for i := 1; i < len(out.Groups); i++ {
		for k := i; k > 0 && out.Groups[k].Group < out.Groups[k-1].Group; k-- {
			out.Groups[k], out.Groups[k-1] = out.Groups[k-1], out.Groups[k]
		}
	}
	return out
}

func (s *JobService) job(j *jobs.Job, p *jobs.Progress) *batcherv1.Job {
	if p == nil {
		// What GetJob reports, less the upstream batches (a read of the
		// store per job): elapsed, success rate, rates and groups come from
		// the job itself, so ListJobs and CancelJob do not say 0s.
		pp := s.m.ProgressOf(j)
		p = &pp
	}
	out := &batcherv1.Job{Id: j.ID, Spec: specToProto(&j.Spec), Progress: progressToProto(p),
		CreatedAt: timestamppb.New(j.CreatedAt), OutputDir: s.m.RelDir(j)}
	if !j.EndedAt.IsZero() {
		out.EndedAt = timestamppb.New(j.EndedAt)
	}
	if j.Error != "" {
		out.Error = status.New(codes.Aborted, j.Error).Proto()
	}
	return out
}

func (s *JobService) GetJob(ctx context.Context, req *batcherv1.GetJobRequest) (*batcherv1.GetJobResponse, error) {
	ctx = s.scope(ctx)
	p, j, err := s.m.Progress(ctx, req.GetId())
	if err != nil {
		return nil, s.jobsStatus(err)
	}
	return &batcherv1.GetJobResponse{Job: s.job(j, &p)}, nil
}

// The bounds of ListJobs' page size.
const (
	DefaultJobsPageSize = 100
	MaxJobsPageSize     = 1000
)

func (s *JobService) ListJobs(ctx context.Context, req *batcherv1.ListJobsRequest) (*batcherv1.ListJobsResponse, error) {
	ctx = s.scope(ctx)
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = DefaultJobsPageSize
	case size < 0 || size > MaxJobsPageSize:
		return nil, invalidArgument("page_size", "1 to "+strconv.Itoa(MaxJobsPageSize)+", got "+strconv.Itoa(size)).Err()
	}
	st := req.GetState()
	if st < 0 || st > batcherv1.JobState_JOB_STATE_EXPIRED {
		return nil, invalidArgument("state", "unknown value "+strconv.Itoa(int(st))).Err()
	}
	js, err := s.m.List(ctx, jobs.ListQuery{State: jobs.State(st), After: req.GetPageToken(), Limit: size})
	if err != nil {
		if errors.Is(err, jobs.ErrInvalid) {
			return nil, invalidArgument("page_token", "names no job").Err()
		}
		return nil, s.jobsStatus(err)
	}
	out := &batcherv1.ListJobsResponse{}
	for _, j := range js {
		out.Jobs = append(out.Jobs, s.job(j, nil))
	}
	if len(js) == size {
		out.NextPageToken = js[len(js)-1].ID
	}
	return out, nil
}

// CancelJob cancels a job that has not ended. The store's conditional
// update decides (jobs.Manager.CancelUnended), not a read before it, so a
// job that ends while the call runs is either cancelled or answered
// FAILED_PRECONDITION naming the state it ended in, never answered as if
// the cancel took.
func (s *JobService) CancelJob(ctx context.Context, req *batcherv1.CancelJobRequest) (*batcherv1.CancelJobResponse, error) {
	ctx = s.scope(ctx)
	j, err := s.m.CancelUnended(ctx, req.GetId())
	if ee := (*jobs.EndedError)(nil); errors.As(err, &ee) {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: the job had already ended, %s: nothing to cancel", ee.ID, ee.State)
	}
	if err != nil {
		return nil, s.jobsStatus(err)
	}
	return &batcherv1.CancelJobResponse{Job: s.job(j, nil)}, nil
}

func (s *JobService) DeleteJob(ctx context.Context, req *batcherv1.DeleteJobRequest) (*batcherv1.DeleteJobResponse, error) {
	ctx = s.scope(ctx)
	if err := s.m.Delete(ctx, req.GetId()); err != nil {
		return nil, s.jobsStatus(err)
	}
	return &batcherv1.DeleteJobResponse{}, nil
}

func (s *JobService) WatchJob(req *batcherv1.WatchJobRequest, stream grpc.ServerStreamingServer[batcherv1.WatchJobResponse]) error {
	err := s.m.Watch(s.scope(stream.Context()), req.GetId(), time.Second, func(p jobs.Progress) error {
		return stream.Send(&batcherv1.WatchJobResponse{Progress: progressToProto(&p)})
	})
	if err != nil {
		if _, ok := status.FromError(err); ok && !errors.Is(err, jobs.ErrNotFound) {
			return err
		}
		return s.jobsStatus(err)
	}
	return nil
}

var outcomes = map[batcherv1.ItemOutcome]jobs.ItemState{
	batcherv1.ItemOutcome_ITEM_OUTCOME_UNSPECIFIED: jobs.ItemPending, // any
	batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED:   jobs.ItemSucceeded,
	batcherv1.ItemOutcome_ITEM_OUTCOME_FAILED:      jobs.ItemFailed,
	batcherv1.ItemOutcome_ITEM_OUTCOME_CANCELLED:   jobs.ItemCancelled,
	batcherv1.ItemOutcome_ITEM_OUTCOME_EXPIRED:     jobs.ItemExpired,
}

// resultsPage is how many results ListJobResults reads at a time.
const resultsPage = 500

func (s *JobService) ListJobResults(req *batcherv1.ListJobResultsRequest, stream grpc.ServerStreamingServer[batcherv1.ListJobResultsResponse]) error {
	ctx := s.scope(stream.Context())
	state, ok := outcomes[req.GetOutcome()]
	if !ok {
		return invalidArgument("outcome", "unknown value "+strconv.Itoa(int(req.GetOutcome()))).Err()
	}
	after := int64(-1)
	if c := req.GetCursor(); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n < 0 {
			return invalidArgument("cursor", "not a cursor from this API").Err()
		}
		after = n
	}
	j, err := s.m.Get(ctx, req.GetId())
	if err != nil {
		return s.jobsStatus(err)
	}
	for {
		ts, err := s.m.Results(ctx, j.ID, after, state, resultsPage)
		if err != nil {
			return s.jobsStatus(err)
		}
		for i := range ts {
			if err := stream.Send(&batcherv1.ListJobResultsResponse{Result: jobResult(j, &ts[i])}); err != nil {
				return err
			}
		}
		if len(ts) < resultsPage {
			return nil
		}
		after = ts[len(ts)-1].Seq
	}
}

// recordCodes maps a stored error code to its gRPC code.
var recordCodes = map[string]codes.Code{
	jobs.CodeInvalidRequest: codes.InvalidArgument,
	jobs.CodeExpired:        codes.DeadlineExceeded,
	jobs.CodeCancelled:      codes.Canceled,
	jobs.CodeRateLimit:      codes.ResourceExhausted,
	jobs.CodeTimeout:        codes.DeadlineExceeded,
	jobs.CodeUnavailable:    codes.Unavailable,
	jobs.CodeServerError:    codes.Unavailable,
	jobs.CodeAuth:           codes.Internal,
}

func jobResult(j *jobs.Job, t *jobs.Task) *batcherv1.JobResult {
	r := &batcherv1.JobResult{Item: t.Item, CustomId: t.CustomID, Group: j.GroupName(t.Group), Run: int32(t.Run),
		Judge: t.Group == jobs.GroupJudge, Model: t.Model, Cursor: strconv.FormatInt(t.Seq, 10)}
	if t.Group == jobs.GroupJudge {
		r.Group = ""
	}
	rec, _ := jobs.DecodeRecord(t.Result)
	r.Dispatch = rec.Dispatch
	if rec.Cost != nil {
		r.CostUsd = *rec.Cost
	}
	c := &batcherv1.Completion{Id: t.CustomID, BatchId: rec.BatchID, BatchSize: int32(rec.BatchSize), Attempts: int32(rec.Attempts), Backend: rec.Backend,
		Usage: &batcherv1.Usage{PromptTokens: rec.PromptTokens, CompletionTokens: rec.CompletionTokens, TotalTokens: rec.PromptTokens + rec.CompletionTokens}}
	r.Completion = c
	switch t.State {
	case jobs.ItemSucceeded:
		r.Outcome = batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED
		if int(rec.FinishReason) < len(finishReasons) {
			c.FinishReason = finishReasons[rec.FinishReason]
		}
		if rec.Embedding != nil {
			c.Output = &batcherv1.Completion_Embedding{Embedding: &batcherv1.Embedding{Values: rec.Embedding}}
		} else {
			c.Output = &batcherv1.Completion_Text{Text: rec.Text}
		}
		if rec.ToolCalls != nil || rec.Refusal != "" || rec.Logprobs != nil || rec.Choices != nil {
			outputMessages(c, rec.Result()) // the whole message, as Submit answers it
		}
		return r
	case jobs.ItemCancelled:
		r.Outcome = batcherv1.ItemOutcome_ITEM_OUTCOME_CANCELLED
	case jobs.ItemExpired:
		r.Outcome = batcherv1.ItemOutcome_ITEM_OUTCOME_EXPIRED
	default:
		r.Outcome = batcherv1.ItemOutcome_ITEM_OUTCOME_FAILED
	}
	code, ok := recordCodes[rec.ErrCode]
	if !ok {
		code = codes.Unknown
	}
	c.Error = status.New(code, rec.ErrMessage).Proto()
	return r
}
