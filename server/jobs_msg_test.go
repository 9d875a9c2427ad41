package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestCreateJobInvalidNamesTheField: an invalid job's INVALID_ARGUMENT
// message starts with the field at fault, not with the jobs package's
// "invalid: ", which the code already says.
func TestCreateJobInvalidNamesTheField(t *testing.T) {
	e := newJobsEnv(t, newFake(), 5)
	spec := &batcherv1.JobSpec{Model: routeChat, RequestsPerMinute: -5}
	_, err := e.createJob(t, spec, &batcherv1.JobItems{Requests: []*batcherv1.Request{chatRequest("1", "a")}})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "spec.requests_per_minute: ") {
		t.Fatalf("CreateJob = %v %q, want INVALID_ARGUMENT starting spec.requests_per_minute", st.Code(), st.Message())
	}
}
