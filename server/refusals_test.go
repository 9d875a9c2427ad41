package server

import (
	"context"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ctxStream is a grpc.ServerStream that has a context and nothing else.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// TestStreamRefusalsAreTheStreams: the refusals the codec records for a
// SubmitStream's requests are that stream's own, found through its
// context: another stream, of the same server or of another server in the
// process, does not see them, and a stream served without the codec has
// none. (They were one map for the whole process.) Only SubmitStream
// refuses a request alone: another method's stream keeps its own context.
func TestStreamRefusalsAreTheStreams(t *testing.T) {
	openMethod := func(c *decodeCodec, method string) context.Context {
		var ctx context.Context
		_ = c.stream(nil, ctxStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: method}, func(_ any, ss grpc.ServerStream) error {
			ctx = ss.Context()
			return nil
		})
		return ctx
	}
	open := func(c *decodeCodec) context.Context {
		return openMethod(c, batcherv1.BatcherService_SubmitStream_FullMethodName)
	}
	if ctx := openMethod(newDecodeCodec(), batcherv1.BatcherService_SubmitStreamed_FullMethodName); ctx != t.Context() || refusalsOf(ctx) != nil {
		t.Errorf("SubmitStreamed's stream context is not the stream's own, or has refusals")
	}
	one, other := newDecodeCodec(), newDecodeCodec()
	a, sameServer, otherServer := open(one), open(one), open(other)
	r := &batcherv1.Request{Id: "r"}
	refusalsOf(a).put(r, status.New(codes.InvalidArgument, "field 999"))
	for name, ctx := range map[string]context.Context{"same server": sameServer, "other server": otherServer, "no codec": t.Context()} {
		if st := refusalsOf(ctx).take(r); st != nil {
			t.Errorf("%s: another stream's refusal seen: %v", name, st)
		}
	}
	if st := refusalsOf(a).take(r); st == nil || st.Code() != codes.InvalidArgument {
		t.Fatalf("the stream's own refusal: %v", st)
	}
	if st := refusalsOf(a).take(r); st != nil {
		t.Errorf("a refusal taken twice: %v", st)
	}
}
