package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestSubmitRefusesStreamNamingTheRPCs: a unary Submit of a request with
// stream set is refused naming the field and the RPCs that stream, not
// with the core's own API names.
func TestSubmitRefusesStreamNamingTheRPCs(t *testing.T) {
	e := newEnv(t, newFake())
	r := chatReq("s", "hi")
	r.Stream = true
	_, err := e.client.Submit(testCtx(t), &batcherv1.SubmitRequest{Request: r})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "request.stream: ") ||
		!strings.Contains(st.Message(), "SubmitStreamed") || strings.Contains(st.Message(), "Do ") {
		t.Fatalf("Submit = %v %q, want INVALID_ARGUMENT naming request.stream and SubmitStreamed", st.Code(), st.Message())
	}
	if n := e.be.calls.Load(); n != 0 {
		t.Fatalf("the backend was called %d times", n)
	}
}
