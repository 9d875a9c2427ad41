package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// JobsOff is the JobService of a server whose jobs are off: every call
// answers FAILED_PRECONDITION with the reason, instead of the UNIMPLEMENTED
// "unknown service" a caller would get if the service were not registered,
// which reads like a wrong address or an old server.
type JobsOff struct {
	batcherv1.UnimplementedJobServiceServer
	err error
}

// NewJobsOff returns a JobService that refuses every call with reason,
// which says how to turn jobs on.
func NewJobsOff(reason string) *JobsOff {
	return &JobsOff{err: status.Error(codes.FailedPrecondition, reason)}
}

// Register registers the service on gs.
func (s *JobsOff) Register(gs *grpc.Server) { batcherv1.RegisterJobServiceServer(gs, s) }

func (s *JobsOff) CreateJob(grpc.ClientStreamingServer[batcherv1.CreateJobRequest, batcherv1.CreateJobResponse]) error {
	return s.err
}

func (s *JobsOff) GetJob(context.Context, *batcherv1.GetJobRequest) (*batcherv1.GetJobResponse, error) {
	return nil, s.err
}

func (s *JobsOff) ListJobs(context.Context, *batcherv1.ListJobsRequest) (*batcherv1.ListJobsResponse, error) {
	return nil, s.err
}

func (s *JobsOff) CancelJob(context.Context, *batcherv1.CancelJobRequest) (*batcherv1.CancelJobResponse, error) {
	return nil, s.err
}

func (s *JobsOff) DeleteJob(context.Context, *batcherv1.DeleteJobRequest) (*batcherv1.DeleteJobResponse, error) {
	return nil, s.err
}

func (s *JobsOff) WatchJob(*batcherv1.WatchJobRequest, grpc.ServerStreamingServer[batcherv1.WatchJobResponse]) error {
	return s.err
}

func (s *JobsOff) ListJobResults(*batcherv1.ListJobResultsRequest, grpc.ServerStreamingServer[batcherv1.ListJobResultsResponse]) error {
	return s.err
}
