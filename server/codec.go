package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wrapped here
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// decodeCodec is grpc's proto codec with one change: a request of any
// batcher.v1 service (BatcherService, JobService, AdminService) that does
// not decode (garbage, a truncated message, invalid
// UTF-8 in a string, a field its type does not declare) becomes the
// caller's INVALID_ARGUMENT rather than grpc-go's INTERNAL "failed to
// unmarshal", which blames the server, or the request served without it.
//
// grpc-go turns every codec error into INTERNAL, so the codec does not fail
// for those messages: it records the error against the message, and the
// interceptors of NewGRPCServer, which every such message passes right after
// decoding, take the record and answer INVALID_ARGUMENT. Other services'
// messages fail as before.
type decodeCodec struct {
	encoding.CodecV2
	bad  sync.Map     // proto message pointer -> its decoding error, until an interceptor takes it
	nbad atomic.Int64 // entries in bad: take skips the map while it is 0
}

func newDecodeCodec() *decodeCodec {
	return &decodeCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (c *decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, isProto := v.(proto.Message)
	if err == nil && isProto {
		// A field the message's type does not declare would be dropped:
		// refused as a message that does not decode (unknown.go). Other
		// services' messages keep theirs.
		if hasUnknown(m) && ours(m) {
			err = unknownFieldError(unknownField(m.ProtoReflect()))
		}
	}
	if err == nil {
		return nil
	}
	if isProto && ours(m) {
		c.nbad.Add(1) // before the entry: take never misses it
		c.bad.Store(v, err)
		return nil
	}
	return err
}

// unknownFieldError is a message that decoded whole but for a field its
// type does not declare (unknownField's text): unlike bytes that do not
// decode, the rest of the message can be trusted, so a stream's request
// that carries one can be refused alone (decodeStream).
type unknownFieldError string

func (e unknownFieldError) Error() string { return string(e) }

// ours reports whether m is a message of this service's package, whose
// decoding errors the interceptors answer.
func ours(m proto.Message) bool {
	return m.ProtoReflect().Descriptor().ParentFile().Package() == batcherPackage
}

// batcherPackage is the proto package of every service NewGRPCServer serves.
var batcherPackage = (&batcherv1.SubmitRequest{}).ProtoReflect().Descriptor().ParentFile().Package()

// take returns, and forgets, the decoding error recorded for m, with its
// status.
func (c *decodeCodec) take(m any) (*status.Status, error) {
	// Unmarshal stored the entry on this goroutine's message before the
	// interceptor runs, so a zero count means no entry for m.
	if c.nbad.Load() == 0 {
		return nil, nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, nil
	}
	err, ok := c.bad.LoadAndDelete(pm)
	if !ok {
		return nil, nil
	}
	c.nbad.Add(-1)
	name := pm.ProtoReflect().Descriptor().FullName()
	return status.New(codes.InvalidArgument, "message does not decode as a "+string(name)+": "+err.(error).Error()), err.(error)
}

func (c *decodeCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if st, _ := c.take(req); st != nil {
		return nil, st.Err()
	}
	return h(ctx, req)
}

func (c *decodeCodec) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ds := &decodeStream{ServerStream: ss, c: c}
	if info != nil && info.FullMethod == batcherv1.BatcherService_SubmitStream_FullMethodName {
		// Only SubmitStream's requests are refused alone (RecvMsg): the
		// other streams' contexts need not carry refusals.
		ds.ctx = context.WithValue(ss.Context(), refusalsKey{}, &ds.refused)
	}
	return h(srv, ds)
}

// decodeStream answers a received message that did not decode with
// INVALID_ARGUMENT, which ends the stream as any failed receive does:
// bytes that do not decode cannot be told from one request to the next.
//
// A SubmitStream request that decoded whole but for a field its type does
// not declare is that request's alone: ending the stream failed every
// other request in flight on it. Its refusal goes to the stream's handler
// (refused, found through the stream's context: refusalsOf), which
// answers it as the request's own Rejection, carrying its id.
type decodeStream struct {
	grpc.ServerStream
	c       *decodeCodec
	ctx     context.Context // the stream's, carrying refused; nil but on SubmitStream
	refused refusals
}

// Context is the stream's context, which carries its refusals on
// SubmitStream.
func (s *decodeStream) Context() context.Context {
	if s.ctx == nil {
		return s.ServerStream.Context()
	}
	return s.ctx
}

func (s *decodeStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	st, err := s.c.take(m)
	if st == nil {
		return nil
	}
	var uf unknownFieldError
	if sr, ok := m.(*batcherv1.SubmitStreamRequest); ok && errors.As(err, &uf) {
		if r := sr.GetRequest(); r != nil {
			s.refused.put(r, st)
			return nil
		}
	}
	return st.Err()
}

// refusalsKey is the context key of a stream's refusals.
type refusalsKey struct{}

// refusalsOf returns the refusals of the stream whose context is ctx, which
// hold, between decodeStream's RecvMsg and the SubmitStream handler's next
// step (stream.request takes it before anything else, on the same
// goroutine), the refusal of each stream request that carries a field its
// type does not declare. They are the stream's own: nothing outlives it,
// and no other stream or server sees them. The key is the message grpc
// decoded into, new for each receive. nil (no refusals) for a stream not
// served under NewGRPCServer's interceptors.
func refusalsOf(ctx context.Context) *refusals {
	f, _ := ctx.Value(refusalsKey{}).(*refusals)
	return f
}

// refusals is a set of requests refused before their handler saw them.
type refusals struct {
	m sync.Map     // *batcherv1.Request -> *status.Status
	n atomic.Int64 // entries in m: take skips the map while it is 0
}

func (f *refusals) put(r *batcherv1.Request, st *status.Status) {
	f.n.Add(1) // before the entry: take never misses it
	f.m.Store(r, st)
}

// take returns, and forgets, r's refusal; nil when it has none (or f is
// nil).
func (f *refusals) take(r *batcherv1.Request) *status.Status {
	if f == nil || f.n.Load() == 0 {
		return nil
	}
	st, ok := f.m.LoadAndDelete(r)
	if !ok {
		return nil
	}
	f.n.Add(-1)
	return st.(*status.Status)
}
