package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
)

// jobsEnv is the env's core with a jobs manager on SQLite behind a
// JobService, over an in-memory listener.
type jobsEnv struct {
	*env
	m    *jobs.Manager
	jobs batcherv1.JobServiceClient
}

func newJobsEnv(t *testing.T, be *fakeBackend, maxItems int64, scope ...func(context.Context) context.Context) *jobsEnv {
	t.Helper()
	e := newEnv(t, be, withCore())
	dir := t.TempDir()
	store, err := jobs.OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.New(jobs.Config{Store: store, Core: e.core, DataDir: dir, Exclusive: true, MaxItems: maxItems,
		CommitInterval: 5 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	js := NewJobService(m, quietLog)
	if len(scope) > 0 {
		js.WithScope(scope[0])
	}
	js.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		be.Release()
		_ = conn.Close()
		gs.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("jobs shutdown: %v", err)
		}
		_ = store.Close()
	})
	return &jobsEnv{env: e, m: m, jobs: batcherv1.NewJobServiceClient(conn)}
}

func chatRequest(id, text string) *batcherv1.Request {
	return &batcherv1.Request{Id: id, Model: routeChat, Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{
		Messages: []*batcherv1.ChatMessage{{Role: "user", Content: text}}}}}
}

// createJob streams spec then chunks of items, and returns the answer.
func (e *jobsEnv) createJob(t *testing.T, spec *batcherv1.JobSpec, chunks ...*batcherv1.JobItems) (*batcherv1.CreateJobResponse, error) {
	t.Helper()
	st, err := e.jobs.CreateJob(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: spec}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: c}}); err != nil {
			break // the server ended the stream: CloseAndRecv has its status
		}
	}
	return st.CloseAndRecv()
}

func (e *jobsEnv) watch(t *testing.T, id string) []*batcherv1.JobProgress {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := e.jobs.WatchJob(ctx, &batcherv1.WatchJobRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var out []*batcherv1.JobProgress
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("WatchJob: %v", err)
		}
		out = append(out, r.GetProgress())
	}
}

func (e *jobsEnv) results(t *testing.T, req *batcherv1.ListJobResultsRequest) []*batcherv1.JobResult {
	t.Helper()
	st, err := e.jobs.ListJobResults(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []*batcherv1.JobResult
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ListJobResults: %v", err)
		}
		out = append(out, r.GetResult())
	}
}

func TestJobServiceEndToEnd(t *testing.T) {
	e := newJobsEnv(t, newFake(), 0)
	var reqs []*batcherv1.Request
	for i := range 120 {
		reqs = append(reqs, chatRequest(fmt.Sprintf("r%d", i), fmt.Sprintf("hello %d", i)))
	}
	reqs = append(reqs, &batcherv1.Request{Id: "bad-priority", Model: routeChat, Priority: 99})
	lines := []*batcherv1.OpenAIBatchLine{
		{Line: []byte(`{"custom_id":"oa","method":"POST","url":"/v1/completions","body":{"model":"complete","prompt":"go"}}`)},
		{Line: []byte(`{"custom_id":"oa-bad","method":"POST","url":"/v1/chat/completions","body":{"model":"nope","messages":[{"role":"user","content":"x"}]}}`)},
	}
	resp, err := e.createJob(t, &batcherv1.JobSpec{Name: "e2e", Model: routeChat},
		&batcherv1.JobItems{Requests: reqs[:60]}, &batcherv1.JobItems{Requests: reqs[60:], OpenaiLines: lines})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if resp.GetAccepted() != 121 || resp.GetInvalid() != 2 || resp.GetJob().GetId() == "" {
		t.Fatalf("CreateJob = %v", resp)
	}
	id := resp.GetJob().GetId()
	ps := e.watch(t, id)
	last := ps[len(ps)-1]
	if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED {
		t.Fatalf("watch ended at %v", last)
	}
	if c := last.GetCounts(); c.GetTotal() != 123 || c.GetSucceeded() != 121 || c.GetFailed() != 2 || c.GetPending() != 0 {
		t.Fatalf("counts %v", c)
	}
	got, err := e.jobs.GetJob(t.Context(), &batcherv1.GetJobRequest{Id: id})
	if err != nil || got.GetJob().GetSpec().GetName() != "e2e" || got.GetJob().GetEndedAt() == nil {
		t.Fatalf("GetJob = %v, %v", got, err)
	}
	all := e.results(t, &batcherv1.ListJobResultsRequest{Id: id})
	if len(all) != 123 {
		t.Fatalf("%d results, want 123", len(all))
	}
	for i, r := range all {
		if r.GetItem() != int64(i) {
			t.Fatalf("result %d is item %d: not in item order", i, r.GetItem())
		}
	}
	if r := all[5]; r.GetCustomId() != "r5" || r.GetCompletion().GetText() != "echo: hello 5" || r.GetOutcome() != batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED {
		t.Fatalf("result 5: %v", r)
	}
	// The batch a result rode in is shown whole, its size beside its id,
	// as Submit's Completion shows it.
	if c := all[5].GetCompletion(); c.GetBatchId() == "" || c.GetBatchSize() < 1 {
		t.Fatalf("result 5's batch: id %q size %d; want both set", c.GetBatchId(), c.GetBatchSize())
	}
	bad := all[120]
	if bad.GetOutcome() != batcherv1.ItemOutcome_ITEM_OUTCOME_FAILED || bad.GetCompletion().GetError().GetCode() != int32(codes.InvalidArgument) {
		t.Fatalf("invalid item's result: %v", bad)
	}
	// From a cursor, only failures.
	failed := e.results(t, &batcherv1.ListJobResultsRequest{Id: id, Outcome: batcherv1.ItemOutcome_ITEM_OUTCOME_FAILED, Cursor: all[120].GetCursor()})
	if len(failed) != 1 || failed[0].GetCustomId() != "oa-bad" || failed[0].GetCompletion().GetError().GetMessage() != `line 123: model: unknown model "nope"` {
		t.Fatalf("failed after the cursor: %v", failed)
	}
	page, err := e.jobs.ListJobs(t.Context(), &batcherv1.ListJobsRequest{State: batcherv1.JobState_JOB_STATE_COMPLETED, PageSize: 1})
	if err != nil || len(page.GetJobs()) != 1 || page.GetJobs()[0].GetId() != id || page.GetNextPageToken() != id {
		t.Fatalf("ListJobs = %v, %v", page, err)
	}
	next, err := e.jobs.ListJobs(t.Context(), &batcherv1.ListJobsRequest{PageSize: 1, PageToken: page.GetNextPageToken()})
	if err != nil || len(next.GetJobs()) != 0 {
		t.Fatalf("second page = %v, %v", next, err)
	}
	if _, err := e.jobs.DeleteJob(t.Context(), &batcherv1.DeleteJobRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.GetJob(t.Context(), &batcherv1.GetJobRequest{Id: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetJob after delete: %v", err)
	}
}

func TestJobServiceErrors(t *testing.T) {
	e := newJobsEnv(t, newFake(), 5)
	ctx := t.Context()
	for name, tc := range map[string]struct {
		spec   *batcherv1.JobSpec
		chunks []*batcherv1.JobItems
		code   codes.Code
	}{
		"empty":         {&batcherv1.JobSpec{Model: routeChat}, nil, codes.InvalidArgument},
		"over limit":    {&batcherv1.JobSpec{Model: routeChat}, []*batcherv1.JobItems{{Requests: []*batcherv1.Request{chatRequest("1", "a"), chatRequest("2", "a"), chatRequest("3", "a"), chatRequest("4", "a"), chatRequest("5", "a"), chatRequest("6", "a")}}}, codes.ResourceExhausted},
		"bad priority":  {&batcherv1.JobSpec{Model: routeChat, Priority: batcherv1.Priority_PRIORITY_URGENT}, nil, codes.InvalidArgument},
		"unknown model": {&batcherv1.JobSpec{Model: "nope"}, nil, codes.InvalidArgument},
		"duplicate custom_id": {&batcherv1.JobSpec{Model: routeChat},
			[]*batcherv1.JobItems{{Requests: []*batcherv1.Request{chatRequest("1", "a"), chatRequest("2", "a")}}, {Requests: []*batcherv1.Request{chatRequest("1", "a")}}}, codes.InvalidArgument},
		"fail on invalid": {&batcherv1.JobSpec{Model: routeChat, FailOnInvalid: true},
			[]*batcherv1.JobItems{{OpenaiLines: []*batcherv1.OpenAIBatchLine{{Line: []byte("{")}}}}, codes.InvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.createJob(t, tc.spec, tc.chunks...)
			if status.Code(err) != tc.code {
				t.Fatalf("CreateJob = %v, want %v", err, tc.code)
			}
		})
	}
	if _, err := e.jobs.GetJob(ctx, &batcherv1.GetJobRequest{Id: "job_nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetJob(unknown) = %v", err)
	}
	if _, err := e.jobs.CancelJob(ctx, &batcherv1.CancelJobRequest{Id: "job_nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("CancelJob(unknown) = %v", err)
	}
	if _, err := e.jobs.DeleteJob(ctx, &batcherv1.DeleteJobRequest{Id: "job_nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("DeleteJob(unknown) = %v", err)
	}
	st, _ := e.jobs.WatchJob(ctx, &batcherv1.WatchJobRequest{Id: "job_nope"})
	if _, err := st.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("WatchJob(unknown) = %v", err)
	}
	rs, _ := e.jobs.ListJobResults(ctx, &batcherv1.ListJobResultsRequest{Id: "job_nope"})
	if _, err := rs.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("ListJobResults(unknown) = %v", err)
	}
	// None of the refused jobs was kept.
	if page, err := e.jobs.ListJobs(ctx, &batcherv1.ListJobsRequest{}); err != nil || len(page.GetJobs()) != 0 {
		t.Fatalf("ListJobs = %v, %v: refused jobs left behind", page, err)
	}
}

// TestJobItemFieldsNeverDropped: a job's item that sets a field a job does
// not take from its items is refused naming the field, never run without
// it.
func TestJobItemFieldsNeverDropped(t *testing.T) {
	e := newJobsEnv(t, newFake(), 5)
	for field, set := range map[string]func(r *batcherv1.Request){
		"priority":    func(r *batcherv1.Request) { r.Priority = batcherv1.Priority_PRIORITY_URGENT },
		"timeout":     func(r *batcherv1.Request) { r.Timeout = durationpb.New(time.Second) },
		"stream":      func(r *batcherv1.Request) { r.Stream = true },
		"dedup":       func(r *batcherv1.Request) { r.Dedup = batcherv1.Dedup_DEDUP_OFF },
		"cache":       func(r *batcherv1.Request) { r.Cache = batcherv1.CacheMode_CACHE_MODE_BYPASS },
		"traceparent": func(r *batcherv1.Request) { r.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
	} {
		t.Run(field, func(t *testing.T) {
			r := chatRequest("1", "a")
			set(r)
			_, err := e.createJob(t, &batcherv1.JobSpec{Model: routeChat, FailOnInvalid: true},
				&batcherv1.JobItems{Requests: []*batcherv1.Request{r}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field+": ") {
				t.Fatalf("CreateJob with %s set = %v, want INVALID_ARGUMENT naming %s", field, err, field)
			}
		})
	}
}

func TestJobServiceCancel(t *testing.T) {
	be := heldFake()
	e := newJobsEnv(t, be, 0)
	var reqs []*batcherv1.Request
	for i := range 200 {
		reqs = append(reqs, chatRequest(fmt.Sprint(i), "x"))
	}
	resp, err := e.createJob(t, &batcherv1.JobSpec{Model: routeChat, ConcurrentRequests: 4}, &batcherv1.JobItems{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	be.waitStarted(t, 1)
	c, err := e.jobs.CancelJob(t.Context(), &batcherv1.CancelJobRequest{Id: resp.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.GetJob().GetProgress().GetState(); s != batcherv1.JobState_JOB_STATE_CANCELLING {
		t.Fatalf("state after CancelJob %v, want CANCELLING", s)
	}
	be.Release()
	ps := e.watch(t, resp.GetJob().GetId())
	last := ps[len(ps)-1]
	if last.GetState() != batcherv1.JobState_JOB_STATE_CANCELLED || last.GetCounts().GetCancelled() < 190 ||
		last.GetCounts().GetCancelled()+last.GetCounts().GetSucceeded() != 200 {
		t.Fatalf("after cancel: %v", last)
	}
	// Once it has ended, a second cancel did not take and says so, naming
	// the state, as the Batch API's cancel does.
	again, err := e.jobs.CancelJob(t.Context(), &batcherv1.CancelJobRequest{Id: resp.GetJob().GetId()})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "the job had already ended, cancelled") {
		t.Fatalf("CancelJob of a cancelled job: %v, %v; want FAILED_PRECONDITION naming cancelled", again, err)
	}
}

// TestEndedJobProgressOnEveryCall: ListJobs reports an ended job's
// progress as GetJob does (its elapsed time, success rate and rates over
// its whole run), not an elapsed of 0s and no rates; CancelJob refuses
// the ended job, FAILED_PRECONDITION naming the state it ended in, rather
// than answer it as if the cancel took.
func TestEndedJobProgressOnEveryCall(t *testing.T) {
	e := newJobsEnv(t, newFake(), 0)
	resp, err := e.createJob(t, &batcherv1.JobSpec{Model: routeChat},
		&batcherv1.JobItems{Requests: []*batcherv1.Request{chatRequest("a", "x"), chatRequest("b", "y"), {Id: "bad", Model: routeChat, Priority: 99}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetJob().GetId()
	if ps := e.watch(t, id); ps[len(ps)-1].GetState() != batcherv1.JobState_JOB_STATE_COMPLETED {
		t.Fatalf("watch ended at %v", ps[len(ps)-1])
	}
	got, err := e.jobs.GetJob(t.Context(), &batcherv1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	want := got.GetJob().GetProgress()
	if want.GetElapsed().AsDuration() <= 0 || want.GetSuccessRate() == 0 || want.GetItemsPerHour() == 0 {
		t.Fatalf("GetJob's progress %v: want an elapsed time, a success rate and a rate", want)
	}
	list, err := e.jobs.ListJobs(t.Context(), &batcherv1.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 1 {
		t.Fatalf("ListJobs = %v, %v", list, err)
	}
	c, err := e.jobs.CancelJob(t.Context(), &batcherv1.CancelJobRequest{Id: id})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition ||
		st.Message() != id+": the job had already ended, completed: nothing to cancel" {
		t.Errorf("CancelJob of a completed job: %v, %v; want FAILED_PRECONDITION naming completed", c, err)
	}
	for name, p := range map[string]*batcherv1.JobProgress{"ListJobs": list.GetJobs()[0].GetProgress()} {
		if p.GetState() != want.GetState() || p.GetElapsed().AsDuration() != want.GetElapsed().AsDuration() ||
			p.GetSuccessRate() != want.GetSuccessRate() || p.GetItemsPerHour() != want.GetItemsPerHour() ||
			p.GetTokensPerSecond() != want.GetTokensPerSecond() || p.GetEta().AsDuration() != 0 || p.GetEta() == nil {
			t.Errorf("%s's progress %v, want GetJob's %v", name, p, want)
		}
	}
}

// Every spec field a caller sets comes back on the job: nothing is dropped
// between the wire and the jobs package.
func TestJobSpecRoundTrip(t *testing.T) {
	two, temp := int32(2), float32(0.5)
	in := &batcherv1.JobSpec{Name: "n", Model: routeChat, Priority: batcherv1.Priority_PRIORITY_LOW, MaxRetries: &two,
		RetryDelay: durationpb.New(time.Second), ConcurrentRequests: 7, CompletionWindow: durationpb.New(time.Hour),
		RequestsPerMinute: 600, TokensPerMinute: 90_000, OutputDir: "team/a", FailOnInvalid: true,
		Params: &batcherv1.GenerationParams{},
		RunGroups: []*batcherv1.RunGroup{{Name: "g", Model: routeChat, Runs: 3, Temperature: &temp, Seeds: []int64{1},
			NextModel: routeChat, Delay: durationpb.New(250 * time.Millisecond), MaxRetries: &two,
			RetryDelay: durationpb.New(2 * time.Second), BackoffFactor: 1.5}}}
	s, st := specToJobs(in)
	if st != nil {
		t.Fatal(st.Err())
	}
	if out := specToProto(&s); !proto.Equal(in, out) {
		t.Fatalf("round trip lost fields:\n in %v\nout %v", in, out)
	}
	for _, tc := range []struct {
		spec  *batcherv1.JobSpec
		field string
	}{
		{&batcherv1.JobSpec{RunGroups: []*batcherv1.RunGroup{{Delay: durationpb.New(-time.Second)}}}, "spec.run_groups[0].delay"},
		{&batcherv1.JobSpec{RunGroups: []*batcherv1.RunGroup{{}, {RetryDelay: durationpb.New(-time.Second)}}}, "spec.run_groups[1].retry_delay"},
		// Never dropped: a parameter a spec cannot default is refused by name.
		{&batcherv1.JobSpec{Params: &batcherv1.GenerationParams{Logprobs: true}}, "spec.params.logprobs"},
		{&batcherv1.JobSpec{Judge: &batcherv1.Judge{Model: "m", PromptTemplate: "x", Params: &batcherv1.GenerationParams{ReasoningEffort: "low"}}},
			"spec.judge.params.reasoning_effort"},
	} {
		if _, st := specToJobs(tc.spec); st == nil || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) {
			t.Errorf("%v: %v, want INVALID_ARGUMENT naming %s", tc.spec, st, tc.field)
		}
	}
}

// TestJobCostAndUpstreamToProto: a job's cost, saving and upstream
// batches reach JobProgress, and a result's cost and dispatch JobResult.
func TestJobCostAndUpstreamToProto(t *testing.T) {
	p := &jobs.Progress{Cost: 1.25, Saving: 1.25, ETA: -1,
		Upstream: &jobs.UpstreamProgress{Items: 300, Batches: map[string]int64{"in_progress": 2, "completed": 1}, ETA: 90 * time.Second}}
	out := progressToProto(p)
	if out.GetCostUsd() != 1.25 || out.GetSavingUsd() != 1.25 || out.GetUpstreamItems() != 300 ||
		out.GetUpstreamBatches()["in_progress"] != 2 || out.GetUpstreamBatches()["completed"] != 1 ||
		out.GetUpstreamEta().AsDuration() != 90*time.Second {
		t.Errorf("JobProgress %v", out)
	}
	p.Upstream.ETA = -1
	if out := progressToProto(p); out.UpstreamEta != nil {
		t.Errorf("an unknown upstream ETA became %v", out.UpstreamEta)
	}
	cost := 0.0005
	rec, _ := json.Marshal(jobs.Record{Text: "hi", Dispatch: jobs.DispatchBatchAPI, Cost: &cost})
	r := jobResult(&jobs.Job{}, &jobs.Task{State: jobs.ItemSucceeded, Result: rec})
	if r.GetCostUsd() != cost || r.GetDispatch() != "batch_api" {
		t.Errorf("JobResult cost %v dispatch %q", r.GetCostUsd(), r.GetDispatch())
	}
}
