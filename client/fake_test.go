package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeServer is a hand-written BatcherServiceServer with hooks. Unset hooks
// fall back to echo behaviour: Submit echoes, SubmitStream runs protocol{}.
type fakeServer struct {
	batcherv1.UnimplementedBatcherServiceServer
	submit func(context.Context, *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error)
	stream func(batcherv1.BatcherService_SubmitStreamServer) error
}

func (f *fakeServer) Submit(ctx context.Context, r *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
	if f.submit != nil {
		return f.submit(ctx, r)
	}
	return &batcherv1.SubmitResponse{Completion: &batcherv1.Completion{
		Id: r.GetRequest().GetId(), Output: &batcherv1.Completion_Text{Text: echo(r.GetRequest())},
	}}, nil
}

func (f *fakeServer) SubmitStream(ss batcherv1.BatcherService_SubmitStreamServer) error {
	if f.stream != nil {
		return f.stream(ss)
	}
	return (&protocol{}).serve(ss)
}

// echo is the fake's deterministic output for r.
func echo(r *batcherv1.Request) string {
	switch {
	case r.GetChat() != nil:
		msgs := r.GetChat().GetMessages()
		if len(msgs) == 0 {
			return "echo:"
		}
		return "echo: " + msgs[len(msgs)-1].GetContent()
	case r.GetCompletion() != nil:
		return "echo: " + r.GetCompletion().GetPrompt()
	default:
		return "echo: " + r.GetEmbedding().GetText()
	}
}

// protocol is a small, faithful model of the SubmitStream contract, with
// knobs for the cases the tests need. One goroutine runs it, so it needs no
// locks.
type protocol struct {
	// hold keeps accepted requests until a Flush or the caller's half-close,
	// then completes them newest first (out of order).
	hold bool
	// reject, when it returns a status, rejects the request.
	reject func(*batcherv1.Request) *spb.Status
	// fail, when it returns a status, completes the request with that error.
	fail func(*batcherv1.Request) *spb.Status

	verbosity batcherv1.Verbosity
	pending   []*batcherv1.Request
	inFlight  map[string]bool
	sum       batcherv1.StreamSummary
}

func (p *protocol) serve(ss batcherv1.BatcherService_SubmitStreamServer) error {
	p.inFlight = make(map[string]bool)
	p.verbosity = batcherv1.Verbosity_VERBOSITY_ALL
	for first := true; ; first = false {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			if err := p.completeAll(ss); err != nil {
				return err
			}
			return p.summary(ss, true)
		}
		if err != nil {
			return err
		}
		if err := p.handle(ss, m, first); err != nil {
			return err
		}
	}
}

func (p *protocol) handle(ss batcherv1.BatcherService_SubmitStreamServer, m *batcherv1.SubmitStreamRequest, first bool) error {
	switch k := m.GetKind().(type) {
	case *batcherv1.SubmitStreamRequest_Options:
		if !first {
			return p.rejectMsg(ss, "", codes.InvalidArgument, "options: allowed only as the first message")
		}
		if v := k.Options.GetVerbosity(); v != batcherv1.Verbosity_VERBOSITY_UNSPECIFIED {
			p.verbosity = v
		}
		return nil
	case *batcherv1.SubmitStreamRequest_Request:
		r := k.Request
		p.sum.Submitted++
		switch {
		case r.GetId() == "":
			return p.rejectMsg(ss, "", codes.InvalidArgument, "id: required on a stream")
		case p.inFlight[r.GetId()]:
			return p.rejectMsg(ss, r.GetId(), codes.InvalidArgument, "id: already in flight")
		}
		if p.reject != nil {
			if st := p.reject(r); st != nil {
				p.sum.Rejected++
				return ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{
					Rejection: &batcherv1.Rejection{Id: r.GetId(), Error: st},
				}})
			}
		}
		p.inFlight[r.GetId()] = true
		if err := p.event(ss, &batcherv1.Event{Id: r.GetId(), Kind: &batcherv1.Event_Queued{Queued: &batcherv1.Queued{Lane: r.GetModel()}}}); err != nil {
			return err
		}
		if err := p.event(ss, &batcherv1.Event{Id: r.GetId(), Kind: &batcherv1.Event_Batched{Batched: &batcherv1.Batched{BatchId: "b-" + r.GetId(), BatchSize: 1}}}); err != nil {
			return err
		}
		if p.hold {
			p.pending = append(p.pending, r)
			return nil
		}
		return p.complete(ss, r, nil)
	case *batcherv1.SubmitStreamRequest_Cancel:
		for i, r := range p.pending {
			if r.GetId() == k.Cancel.GetId() {
				p.pending = slices.Delete(p.pending, i, i+1)
				return p.complete(ss, r, status.New(codes.Canceled, "cancelled by the caller").Proto())
			}
		}
		return p.rejectMsg(ss, "", codes.NotFound, "cancel.id: no such request in flight")
	case *batcherv1.SubmitStreamRequest_Flush:
		return p.completeAll(ss)
	}
	return p.rejectMsg(ss, "", codes.InvalidArgument, "kind: required")
}

func (p *protocol) rejectMsg(ss batcherv1.BatcherService_SubmitStreamServer, id string, c codes.Code, msg string) error {
	p.sum.Rejected++
	return ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{
		Rejection: &batcherv1.Rejection{Id: id, Error: status.New(c, msg).Proto()},
	}})
}

func (p *protocol) event(ss batcherv1.BatcherService_SubmitStreamServer, ev *batcherv1.Event) error {
	if p.verbosity != batcherv1.Verbosity_VERBOSITY_ALL {
		return nil
	}
	ev.Time = timestamppb.Now()
	return ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Event{Event: ev}})
}

// completeAll completes every held request, newest first.
func (p *protocol) completeAll(ss batcherv1.BatcherService_SubmitStreamServer) error {
	for len(p.pending) > 0 {
		r := p.pending[len(p.pending)-1]
		p.pending = p.pending[:len(p.pending)-1]
		if err := p.complete(ss, r, nil); err != nil {
			return err
		}
	}
	return nil
}

func (p *protocol) complete(ss batcherv1.BatcherService_SubmitStreamServer, r *batcherv1.Request, st *spb.Status) error {
	if st == nil && p.fail != nil {
		st = p.fail(r)
	}
	if err := p.event(ss, &batcherv1.Event{Id: r.GetId(), Kind: &batcherv1.Event_Dispatched{Dispatched: &batcherv1.Dispatched{BatchId: "b-" + r.GetId(), Attempt: 1, Backend: "fake"}}}); err != nil {
		return err
	}
	c := &batcherv1.Completion{Id: r.GetId(), Metadata: r.GetMetadata(), BatchId: "b-" + r.GetId(), BatchSize: 1, Attempts: 1, Backend: "fake"}
	if st != nil {
		c.Error = st
		p.sum.Failed++
	} else {
		c.Output = &batcherv1.Completion_Text{Text: echo(r)}
		c.FinishReason = batcherv1.FinishReason_FINISH_REASON_STOP
		p.sum.Completed++
	}
	delete(p.inFlight, r.GetId())
	if err := ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: c}}); err != nil {
		return err
	}
	// A summary after every tenth terminal result, standing in for the
	// periodic one.
	if (p.sum.Completed+p.sum.Failed)%10 == 0 {
		return p.summary(ss, false)
	}
	return nil
}

func (p *protocol) summary(ss batcherv1.BatcherService_SubmitStreamServer, final bool) error {
	s := &batcherv1.StreamSummary{
		Time: timestamppb.Now(), Submitted: p.sum.Submitted, InFlight: int64(len(p.inFlight)),
		Completed: p.sum.Completed, Failed: p.sum.Failed, Rejected: p.sum.Rejected, Final: final,
	}
	return ss.Send(&batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Summary{Summary: s}})
}

// serve starts srv on an in-memory listener and returns a connection to it;
// both are closed when the test ends.
func serve(t testing.TB, srv batcherv1.BatcherServiceServer, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	batcherv1.RegisterBatcherServiceServer(gs, srv)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
		wg.Wait()
	})
	return cc
}

// newClient serves srv and returns a Client of it.
func newClient(t testing.TB, srv batcherv1.BatcherServiceServer, opts ...grpc.ServerOption) *client.Client {
	t.Helper()
	return client.New(serve(t, srv, opts...))
}
