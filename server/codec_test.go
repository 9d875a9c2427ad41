package server

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends []byte as they are, so that a test can put any bytes on
// the wire; it decodes replies as proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// undecodable returns bytes that do not decode as a message whose field
// 1 or 2 (fieldNum) is a Request.
func undecodable(fieldNum protowire.Number) map[string][]byte {
	valid, _ := proto.Marshal(chatReq("a", "hello there"))
	wrap := func(req []byte) []byte {
		b := protowire.AppendTag(nil, fieldNum, protowire.BytesType)
		return protowire.AppendBytes(b, req)
	}
	badUTF8 := protowire.AppendTag(nil, 1, protowire.BytesType) // Request.id
	badUTF8 = protowire.AppendString(badUTF8, "\xff\xfe")
	full := wrap(valid)
	return map[string][]byte{
		"garbage":      {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01},
		"truncated":    full[:len(full)-3],
		"invalid UTF8": wrap(badUTF8),
	}
}

// TestUndecodableRequestIsInvalidArgument sends bytes that do not decode
// over a real connection: every RPC (unary, client and server streaming, of
// each batcher.v1 service) answers INVALID_ARGUMENT naming the message, not
// INTERNAL.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "fake", Backend: newFake()}),
		batcher.WithRoute(batcher.Route{Name: routeChat, Op: batcher.OpChat, Backend: "fake",
			Batch: batcher.BatchConfig{Window: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(core, WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(nil)
	srv.Register(gs)
	NewJobsOff("jobs are off").Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = conn.Close()
		if err := srv.Shutdown(testCtx(t)); err != nil {
			t.Error(err)
		}
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve after Stop: %v", err)
		}
	}()
	ctx := testCtx(t)
	check := func(what, message string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "does not decode as a batcher.v1."+message+":") {
			t.Errorf("%s: %v, want INVALID_ARGUMENT saying it does not decode as a batcher.v1.%s", what, st, message)
		}
	}
	for name, b := range undecodable(1) {
		var resp batcherv1.SubmitResponse
		err := conn.Invoke(ctx, batcherv1.BatcherService_Submit_FullMethodName, b, &resp, grpc.ForceCodecV2(rawCodec{}))
		check("Submit "+name, "SubmitRequest", err)
	}
	// stream sends b on a stream of method and reports how the stream ends.
	stream := func(desc *grpc.StreamDesc, method string, b []byte) error {
		s, err := conn.NewStream(ctx, desc, method, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(b); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for { // a final summary may come first
			var m batcherv1.SubmitStreamResponse
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
		}
	}
	for name, b := range undecodable(2) {
		err := stream(&batcherv1.BatcherService_ServiceDesc.Streams[0], batcherv1.BatcherService_SubmitStream_FullMethodName, b)
		check("SubmitStream "+name, "SubmitStreamRequest", err)
	}
	for name, b := range undecodable(1) {
		err := stream(&batcherv1.BatcherService_ServiceDesc.Streams[1], batcherv1.BatcherService_SubmitStreamed_FullMethodName, b)
		check("SubmitStreamed "+name, "SubmitStreamedRequest", err)
	}
	garbage := undecodable(1)["garbage"]
	var job batcherv1.GetJobResponse
	err = conn.Invoke(ctx, batcherv1.JobService_GetJob_FullMethodName, garbage, &job, grpc.ForceCodecV2(rawCodec{}))
	check("GetJob garbage", "GetJobRequest", err)
	err = stream(&batcherv1.JobService_ServiceDesc.Streams[1], batcherv1.JobService_WatchJob_FullMethodName, garbage)
	check("WatchJob garbage", "WatchJobRequest", err)
	// The codec still decodes good messages.
	resp, err := batcherv1.NewBatcherServiceClient(conn).Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("", "ok")})
	if err != nil || resp.GetCompletion().GetText() != "echo: ok" {
		t.Fatalf("Submit = %v, %v", resp, err)
	}
}
