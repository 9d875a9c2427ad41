package client_test

import (
	"errors"
	"testing"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedResponses turns fuzz bytes into what a server, right or wrong,
// might send: every kind of message, for known, unknown and empty ids, with
// fields set or missing.
func scriptedResponses(data []byte) []*batcherv1.SubmitStreamResponse {
	ids := []string{"a", "b", "c", "", "zz"}
	var out []*batcherv1.SubmitStreamResponse
	for _, b := range data {
		id := ids[int(b>>4)%len(ids)]
		var m *batcherv1.SubmitStreamResponse
		switch b & 0x0f {
		case 0:
			m = &batcherv1.SubmitStreamResponse{}
		case 1:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Event{Event: &batcherv1.Event{Id: id}}}
		case 2:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Event{}}
		case 3:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: &batcherv1.Completion{Id: id}}}
		case 4:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: &batcherv1.Completion{
				Id: id, Error: status.New(codes.Unavailable, "x").Proto()}}}
		case 5:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: &batcherv1.Completion{
				Id: id, Error: &spb.Status{}}}} // an OK status as an error: success
		case 6:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{}}
		case 7:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{Rejection: &batcherv1.Rejection{Id: id}}}
		case 8:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{Rejection: &batcherv1.Rejection{
				Id: id, Error: status.New(codes.InvalidArgument, "x").Proto()}}}
		case 9:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{}}
		case 10:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Summary{Summary: &batcherv1.StreamSummary{Final: b&0x80 != 0}}}
		default:
			m = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Summary{}}
		}
		out = append(out, m)
	}
	return out
}

// Whatever the server sends, the client never panics, every handle
// resolves exactly as the messages say, and Close returns.
func FuzzStreamServerMessages(f *testing.F) {
	f.Add([]byte{0x03, 0x13, 0x23}, false)             // all complete
	f.Add([]byte{0x01, 0x08, 0x14, 0x27}, true)        // events, rejection, failure, rejection without status
	f.Add([]byte{0x33, 0x43, 0x09, 0x06, 0x0a}, false) // empty and unknown ids only: nothing resolves
	f.Add([]byte{0x03, 0x03, 0x83, 0x8a, 0x0b, 0x00, 0x02, 0x05}, true)
	f.Fuzz(func(t *testing.T, data []byte, fail bool) {
		script := scriptedResponses(data)
		srv := &fakeServer{stream: func(ss batcherv1.BatcherService_SubmitStreamServer) error {
			for range 4 { // options and three requests
				if _, err := ss.Recv(); err != nil {
					return err
				}
			}
			for _, m := range script {
				if err := ss.Send(m); err != nil {
					return err
				}
			}
			if fail {
				return status.Error(codes.Unavailable, "scripted failure")
			}
			return nil
		}}
		c := newClient(t, srv)
		s, err := c.Stream(t.Context(), client.WithVerbosity(batcherv1.Verbosity_VERBOSITY_ALL),
			client.OnEvent(func(*batcherv1.Event) {}),
			client.OnRejection(func(*batcherv1.Rejection) {}))
		if err != nil {
			t.Fatal(err)
		}
		hs := map[string]*client.Handle{}
		for _, id := range []string{"a", "b", "c"} {
			hs[id] = mustSend(t, s, client.Complete("sim", id, client.WithID(id)))
		}
		closeErr := s.Close(t.Context())

		// What each handle should have got: the first completion or
		// rejection naming it.
		first := map[string]*batcherv1.SubmitStreamResponse{}
		for _, m := range script {
			var id string
			switch {
			case m.GetCompletion() != nil:
				id = m.GetCompletion().GetId()
			case m.GetRejection() != nil:
				id = m.GetRejection().GetId()
			default:
				continue
			}
			if _, ok := first[id]; !ok {
				first[id] = m
			}
		}
		unanswered := 0
		for id, h := range hs {
			if !resolved(h) {
				t.Fatalf("handle %s unresolved after Close", id)
			}
			comp, err := h.Wait(t.Context())
			m := first[id]
			switch {
			case m == nil:
				unanswered++
				if !errors.Is(err, client.ErrStreamBroken) || comp != nil {
					t.Errorf("unanswered %s = %v, %v; want ErrStreamBroken", id, comp, err)
				}
			case m.GetCompletion() != nil:
				if comp.GetId() != id {
					t.Errorf("completed %s = %v, want its completion", id, comp)
				}
				if want := status.FromProto(m.GetCompletion().GetError()).Code(); status.Code(err) != want {
					t.Errorf("completed %s: code %v, want %v", id, status.Code(err), want)
				}
			default:
				if comp != nil || err == nil || errors.Is(err, client.ErrStreamBroken) {
					t.Errorf("rejected %s = %v, %v; want the rejection's status", id, comp, err)
				}
			}
		}
		switch {
		case fail && status.Code(closeErr) != codes.Unavailable:
			t.Errorf("Close = %v, want UNAVAILABLE", closeErr)
		case !fail && unanswered > 0 && status.Code(closeErr) != codes.Internal:
			t.Errorf("Close = %v with %d unanswered, want INTERNAL", closeErr, unanswered)
		case !fail && unanswered == 0 && closeErr != nil:
			t.Errorf("Close = %v, want nil", closeErr)
		}
	})
}
