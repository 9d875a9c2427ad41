package server

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// With jobs off, every JobService call is FAILED_PRECONDITION with the
// reason, not UNIMPLEMENTED.
func TestJobsOff(t *testing.T) {
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer()
	NewJobsOff("jobs need --data-dir").Register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); gs.Stop() })
	c := batcherv1.NewJobServiceClient(conn)
	ctx := t.Context()
	calls := map[string]func() error{
		"CreateJob": func() error {
			st, err := c.CreateJob(ctx)
			if err != nil {
				return err
			}
			_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{}}})
			_, err = st.CloseAndRecv()
			return err
		},
		"GetJob":    func() error { _, err := c.GetJob(ctx, &batcherv1.GetJobRequest{Id: "x"}); return err },
		"ListJobs":  func() error { _, err := c.ListJobs(ctx, &batcherv1.ListJobsRequest{}); return err },
		"CancelJob": func() error { _, err := c.CancelJob(ctx, &batcherv1.CancelJobRequest{Id: "x"}); return err },
		"DeleteJob": func() error { _, err := c.DeleteJob(ctx, &batcherv1.DeleteJobRequest{Id: "x"}); return err },
		"WatchJob": func() error {
			st, err := c.WatchJob(ctx, &batcherv1.WatchJobRequest{Id: "x"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"ListJobResults": func() error {
			st, err := c.ListJobResults(ctx, &batcherv1.ListJobResultsRequest{Id: "x"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	if n := len(batcherv1.JobService_ServiceDesc.Methods) + len(batcherv1.JobService_ServiceDesc.Streams); n != len(calls) {
		t.Fatalf("JobService has %d methods, the test calls %d", n, len(calls))
	}
	for name, call := range calls {
		err := call()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "--data-dir") {
			t.Errorf("%s = %v, want FAILED_PRECONDITION naming --data-dir", name, err)
		}
	}
}
