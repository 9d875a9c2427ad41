package bench

// The echoes Batcher is compared with (compare): the minimal echo and the
// shaped echo, and the test that keeps the shaped echo's answer Batcher's.

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// echoServer is the bare baseline: the BatcherService's own messages, with
// every request answered at once by a Completion. With a nil template the
// Completion holds the request's id and the text "ok" and nothing else
// (the minimal echo, as in every earlier run); with one it carries every
// field the template sets, as Batcher fills them (the shaped echo, see
// shapedFrom).
type echoServer struct {
	batcherv1.UnimplementedBatcherServiceServer
	template *batcherv1.Completion
	idSeq    atomic.Uint64 // the shaped echo's ids, as the server's newIDIn
}

// echoIDPrefix is as long as the prefix of the ids Batcher's server gives
// requests sent without one ("srv-", 12 hex digits, "-").
const echoIDPrefix = "srv-000000000000-"

// shapedID is the id the shaped echo answers a request with: the
// request's own, or, for one sent without an id, a new one of the shape
// Batcher's server gives (its prefix, then a counter in base 36), written
// into m's buffer as the server writes it into its reply's.
func (e *echoServer) shapedID(m *shapedReply, id string) string {
	if id != "" {
		return id
	}
	b := strconv.AppendUint(append(m.idBuf[:0], echoIDPrefix...), e.idSeq.Add(1), 36)
	return unsafe.String(&b[0], len(b))
}

func minimalCompletion(id string) *batcherv1.Completion {
	return &batcherv1.Completion{Id: id, Output: &batcherv1.Completion_Text{Text: "ok"}}
}

// shapedReply is the shaped echo's answer and the messages it points to in
// one allocation, the way the server builds Batcher's
// (server/translate.go), so that the shaped echo pays no more per answer
// than Batcher does. On a stream it comes from shapedReplies and goes back
// cleared once sent, as the server recycles a stream's Completions
// (server/stream.go); a unary answer is allocated, as Submit's is.
type shapedReply struct {
	unary  batcherv1.SubmitResponse
	stream batcherv1.SubmitStreamResponse
	kind   batcherv1.SubmitStreamResponse_Completion
	c      batcherv1.Completion
	t      batcherv1.Timings
	d      [4]durationpb.Duration
	u      batcherv1.Usage
	text   batcherv1.Completion_Text
	idBuf  [32]byte // the id the echo gives a request sent without one
}

var shapedReplies = sync.Pool{New: func() any { return new(shapedReply) }}

// fill fills m's Completion for the request id from the template t.
func (m *shapedReply) fill(t *batcherv1.Completion, id string) *batcherv1.Completion {
	c := &m.c
	c.Id = id
	m.text.Text = t.GetText()
	c.Output = &m.text
	c.FinishReason = t.FinishReason
	c.BatchId, c.BatchSize, c.Attempts, c.Backend = t.BatchId, t.BatchSize, t.Attempts, t.Backend
	if u := t.Usage; u != nil {
		m.u.PromptTokens, m.u.CompletionTokens, m.u.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
		c.Usage = &m.u
	}
	if tt := t.Timings; tt != nil {
		for i, d := range []*durationpb.Duration{tt.BatchWait, tt.Queued, tt.Upstream, tt.Total} {
			m.d[i].Seconds, m.d[i].Nanos = d.GetSeconds(), d.GetNanos()
		}
		m.t.BatchWait, m.t.Queued, m.t.Upstream, m.t.Total = &m.d[0], &m.d[1], &m.d[2], &m.d[3]
		c.Timings = &m.t
	}
	return c
}

func (e *echoServer) Submit(_ context.Context, in *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
	id := in.GetRequest().GetId()
	if e.template == nil {
		return &batcherv1.SubmitResponse{Completion: minimalCompletion(id)}, nil
	}
	m := new(shapedReply)
	m.unary.Completion = m.fill(e.template, e.shapedID(m, id))
	return &m.unary, nil
}

func (e *echoServer) SubmitStream(s batcherv1.BatcherService_SubmitStreamServer) error {
	for {
		in, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		r := in.GetRequest()
		if r == nil {
			continue
		}
		var (
			out *batcherv1.SubmitStreamResponse
			m   *shapedReply
		)
		if e.template == nil {
			out = &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: minimalCompletion(r.GetId())}}
		} else {
			m = shapedReplies.Get().(*shapedReply)
			m.kind.Completion = m.fill(e.template, e.shapedID(m, r.GetId()))
			m.stream.Kind = &m.kind
			out = &m.stream
		}
		if err := s.Send(out); err != nil {
			return err
		}
		if m != nil {
			*m = shapedReply{}
			shapedReplies.Put(m)
		}
	}
}

// shapedFrom returns the template for a shaped echo: what Batcher answered
// to a request of the load, its id cleared. Only the fields shapedReply
// copies are kept, and TestShapedEchoMatchesBatcher checks that they are
// all Batcher sets.
func shapedFrom(tb testing.TB, t *target) *batcherv1.Completion {
	tb.Helper()
	resp, err := t.client.Submit(context.Background(), &batcherv1.SubmitRequest{Request: newRequest("template")})
	if err != nil {
		tb.Fatal(err)
	}
	c := proto.CloneOf(resp.GetCompletion())
	c.Id = ""
	return c
}

// TestShapedEchoMatchesBatcher checks the shaped echo against what it
// stands for: for the same request, on either server, its Completion is the
// one Batcher sent, field for field, up to the figures that vary per call
// (the timings' values and the batch's id and size). A field Batcher starts
// setting that the echo does not copy fails here.
func TestShapedEchoMatchesBatcher(t *testing.T) {
	for _, st := range compareSetups {
		t.Run("server="+st.name(), func(t *testing.T) {
			bt := serveBatcher(t, st)
			defer bt.stop()
			template := shapedFrom(t, bt)
			if template.GetBatchId() == "" || template.GetTimings().GetTotal() == nil || template.GetBackend() == "" {
				t.Fatalf("Batcher's completion %v lacks the fields the shaped echo is for", template)
			}
			shaped := serveEcho(t, template, st)
			defer shaped.stop()
			ctx := context.Background()
			for _, tg := range []*target{bt, shaped} {
				// Unary and stream answers alike.
				resp, err := tg.client.Submit(ctx, &batcherv1.SubmitRequest{Request: newRequest("r-1")})
				if err != nil {
					t.Fatal(err)
				}
				s, err := tg.client.SubmitStream(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: newRequest("r-1")}}); err != nil {
					t.Fatal(err)
				}
				if err := s.CloseSend(); err != nil {
					t.Fatal(err)
				}
				var streamed *batcherv1.Completion
				for {
					m, err := s.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if c := m.GetCompletion(); c != nil {
						streamed = c
					}
				}
				if streamed == nil {
					t.Fatal("the stream ended without a completion")
				}
				for _, c := range []*batcherv1.Completion{resp.GetCompletion(), streamed} {
					got, want := alike(c), alike(template)
					want.Id = "r-1"
					if !proto.Equal(got, want) {
						t.Errorf("completion %v,\nwant the shape of %v", got, want)
					}
				}
				// A request sent without an id (as the unary load sends)
				// is answered with one of the server's shape.
				resp, err = tg.client.Submit(ctx, &batcherv1.SubmitRequest{Request: newRequest("")})
				if err != nil {
					t.Fatal(err)
				}
				if id := resp.GetCompletion().GetId(); len(id) <= len(echoIDPrefix) || !strings.HasPrefix(id, "srv-") ||
					id[len(echoIDPrefix)-1] != '-' || strings.Contains(id[len(echoIDPrefix):], "-") {
					t.Errorf("a request without an id was answered with id %q, want %q and a counter", id, echoIDPrefix)
				}
			}
		})
	}
}

// alike is c with the figures that vary from call to call set to fixed
// values where c has them.
func alike(c *batcherv1.Completion) *batcherv1.Completion {
	c = proto.CloneOf(c)
	if c.BatchId != "" {
		c.BatchId = "batch"
	}
	if c.BatchSize != 0 {
		c.BatchSize = 1
	}
	if tt := c.Timings; tt != nil {
		for _, d := range []*durationpb.Duration{tt.BatchWait, tt.Queued, tt.Upstream, tt.Total} {
			if d != nil {
				d.Seconds, d.Nanos = 0, 1
			}
		}
	}
	return c
}
