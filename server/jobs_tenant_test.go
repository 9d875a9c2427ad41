package server

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
)

// byMetadata stands in for batcherd's scope: the tenant named by the
// x-test-tenant metadata, with quotas of 1 job and 3 items a job.
func byMetadata(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-test-tenant"); len(v) > 0 {
		return jobs.WithTenant(ctx, jobs.Tenant{Name: v[0], MaxJobs: 1, MaxItems: 3})
	}
	return ctx
}

func as(ctx context.Context, tenant string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-test-tenant", tenant)
}

// TestJobServiceTenantIsolation: tenant b gets NOT_FOUND, worded as for an
// unknown id, for every call on a's job, and lists none of a's jobs.
func TestJobServiceTenantIsolation(t *testing.T) {
	be := heldFake()
	e := newJobsEnv(t, be, 0, byMetadata)
	ctxA, ctxB := as(t.Context(), "team-a"), as(t.Context(), "team-b")
	create := func(ctx context.Context, n int) (*batcherv1.CreateJobResponse, error) {
		st, err := e.jobs.CreateJob(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{Model: routeChat}}})
		var reqs []*batcherv1.Request
		for range n {
			reqs = append(reqs, chatRequest("", "x"))
		}
		_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: &batcherv1.JobItems{Requests: reqs}}})
		return st.CloseAndRecv()
	}
	resp, err := create(ctxA, 2)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetJob().GetId()
	be.waitStarted(t, 1) // running, held

	_, unknown := e.jobs.GetJob(ctxB, &batcherv1.GetJobRequest{Id: "job_00000000000000000000"})
	wantNotFound := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.NotFound {
			t.Fatalf("%s as team-b = %v, want NOT_FOUND", what, err)
		}
		if len(status.Convert(err).Message()) != len(status.Convert(unknown).Message()) {
			t.Errorf("%s as team-b says %q; an unknown id says %q", what, status.Convert(err).Message(), status.Convert(unknown).Message())
		}
	}
	_, err = e.jobs.GetJob(ctxB, &batcherv1.GetJobRequest{Id: id})
	wantNotFound("GetJob", err)
	_, err = e.jobs.CancelJob(ctxB, &batcherv1.CancelJobRequest{Id: id})
	wantNotFound("CancelJob", err)
	_, err = e.jobs.DeleteJob(ctxB, &batcherv1.DeleteJobRequest{Id: id})
	wantNotFound("DeleteJob", err)
	w, _ := e.jobs.WatchJob(ctxB, &batcherv1.WatchJobRequest{Id: id})
	_, err = w.Recv()
	wantNotFound("WatchJob", err)
	r, _ := e.jobs.ListJobResults(ctxB, &batcherv1.ListJobResultsRequest{Id: id})
	_, err = r.Recv()
	wantNotFound("ListJobResults", err)
	if page, err := e.jobs.ListJobs(ctxB, &batcherv1.ListJobsRequest{}); err != nil || len(page.GetJobs()) != 0 {
		t.Fatalf("team-b lists %v, %v", page, err)
	}
	if _, err := e.jobs.ListJobs(ctxB, &batcherv1.ListJobsRequest{PageToken: id}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("team-b paging from a's job = %v, want INVALID_ARGUMENT as for an unknown token", err)
	}
	if page, err := e.jobs.ListJobs(ctxA, &batcherv1.ListJobsRequest{}); err != nil || len(page.GetJobs()) != 1 {
		t.Fatalf("team-a lists %v, %v", page, err)
	}
	if got, err := e.jobs.GetJob(ctxA, &batcherv1.GetJobRequest{Id: id}); err != nil || got.GetJob().GetId() != id {
		t.Fatalf("team-a's own job: %v, %v", got, err)
	}

	// Quotas: a second job of a's while the first runs is refused with a
	// RetryInfo and the quota named; a job over 3 items with neither a
	// retry nor anything kept.
	_, err = create(ctxA, 1)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("over the jobs quota: %v", err)
	}
	var retry, quota bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration() > 0
		case *errdetails.QuotaFailure:
			quota = len(d.GetViolations()) == 1 && d.GetViolations()[0].GetDescription() != ""
		}
	}
	if !retry || !quota {
		t.Fatalf("over the jobs quota: details %v, want RetryInfo and QuotaFailure", st.Details())
	}
	_, err = create(ctxB, 4)
	st = status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("over the items quota: %v", err)
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			t.Fatalf("over the items quota: a RetryInfo, but a retry would be refused again")
		}
	}
	if page, err := e.jobs.ListJobs(ctxB, &batcherv1.ListJobsRequest{}); err != nil || len(page.GetJobs()) != 0 {
		t.Fatalf("the refused job was kept: %v, %v", page, err)
	}
}
