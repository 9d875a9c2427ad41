package server

import (
	"context"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tenantFromMetadata stands in for the authentication layer: the tenant is
// the "x-test-tenant" metadata, with every route at every priority.
func tenantFromMetadata(ctx context.Context) *batcher.Access {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-test-tenant"); len(v) > 0 {
		return &batcher.Access{Tenant: v[0], MaxPriority: batcher.PriorityUrgent}
	}
	return nil
}

func TestTenantQuotaOverGRPC(t *testing.T) {
	e := newEnv(t, newFake(), withServer(WithAccessFunc(tenantFromMetadata)))
	if err := e.core.SetTenants([]batcher.TenantPolicy{{Name: "team-a", Quotas: batcher.TenantQuotas{RPM: 1}}}); err != nil {
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-test-tenant", "team-a")
	if _, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("1", "hi")}); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("2", "hi")})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != `tenant "team-a": quota rpm exceeded: limit 1 request a minute` {
		t.Fatalf("second Submit: %v", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 || retry.GetRetryDelay().AsDuration() > time.Minute {
		t.Fatalf("RetryInfo %v, want a delay within the minute", retry)
	}
	// On a stream the same quota answers with a rejection.
	s := e.openStream(t, ctx)
	s.send(reqMsg(chatReq("3", "hi")))
	rej := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetRejection() != nil }).GetRejection()
	if rej.GetId() != "3" || codes.Code(rej.GetError().GetCode()) != codes.ResourceExhausted {
		t.Fatalf("stream rejection %v", rej)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.drain(); err != nil {
		t.Fatal(err)
	}
	// Another tenant is not held back.
	other := metadata.AppendToOutgoingContext(testCtx(t), "x-test-tenant", "team-b")
	if _, err := e.client.Submit(other, &batcherv1.SubmitRequest{Request: chatReq("4", "hi")}); err != nil {
		t.Fatal(err)
	}
}

// TestStreamRevoked: once the caller's Access is revoked, the open stream
// refuses new requests with an UNAUTHENTICATED Rejection, finishes the one
// it accepted, and ends UNAUTHENTICATED after a final summary, without the
// caller half-closing.
func TestStreamRevoked(t *testing.T) {
	be := heldFake()
	revoked := make(chan struct{})
	access := (&batcher.Access{Tenant: "team-a", MaxPriority: batcher.PriorityUrgent}).WithRevoked(revoked)
	e := newEnv(t, be, withServer(WithAccessFunc(func(context.Context) *batcher.Access { return access })))
	s := e.openStream(t, testCtx(t))
	s.send(reqMsg(chatReq("accepted", "hi")))
	s.send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Flush{Flush: &batcherv1.Flush{}}})
	be.waitStarted(t, 1)
	close(revoked)
	s.send(reqMsg(chatReq("late", "hi")))
	rej := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetRejection() != nil }).GetRejection()
	if rej.GetId() != "late" || codes.Code(rej.GetError().GetCode()) != codes.Unauthenticated {
		t.Fatalf("rejection %v, want UNAUTHENTICATED for late", rej)
	}
	be.Release()
	msgs, err := s.drain()
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream ended %v, want UNAUTHENTICATED", err)
	}
	ta := tallyOf(msgs)
	if c := ta.completions["accepted"]; c == nil || c.GetError() != nil {
		t.Fatalf("the accepted request's completion %v", c)
	}
	if ta.final == nil {
		t.Fatal("no final summary")
	}
}
