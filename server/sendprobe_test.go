package server

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestSubmitStreamedLongAnswerStraight: a long answer (about 35 KiB of
// messages, past the straight budget) to a caller that keeps up. Probes
// tell the sender that gRPC's writer took what it sent, so the budget
// never runs out: every text delta goes straight from the upstream's
// reader (none is relayed by the handler, only the last, which carries
// the finish reason), one message each, in order, all before the
// Completion. Without probes (or with a grpc-go whose transport stream
// lost SendCompress, probesWork) some 2,000 of them would be relayed.
func TestSubmitStreamedLongAnswerStraight(t *testing.T) {
	f := &pacedFake{n: 3000, ack: make(chan struct{}), numbered: true}
	e := newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "numbered", Backend: f}),
		batcher.WithRoute(batcher.Route{Name: "numbered", Op: batcher.OpChat, Backend: "numbered"}),
	))
	r := chatReq("long", "a long answer")
	r.Model = "numbered"
	r0 := e.srv.relayed.Load()
	rs, err := e.client.SubmitStreamed(testCtx(t), &batcherv1.SubmitStreamedRequest{Request: r})
	if err != nil {
		t.Fatal(err)
	}
	var got, want strings.Builder
	for i := range f.n {
		want.WriteString(strconv.Itoa(i) + " ")
	}
	var c *batcherv1.Completion
	for i := 0; c == nil; i++ {
		m, err := rs.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if c = m.GetCompletion(); c != nil {
			break
		}
		d := m.GetDelta()
		if d.GetText() == "" {
			continue // the last delta: the finish reason
		}
		if w := strconv.Itoa(i) + " "; d.GetText() != w {
			t.Fatalf("delta %d holds %q, want %q", i, d.GetText(), w)
		}
		got.WriteString(d.GetText())
		f.ack <- struct{}{}
	}
	if got.String() != want.String() || c.GetText() != want.String() || c.GetError() != nil {
		t.Fatalf("deltas %d bytes, completion %d bytes (error %v), want %d bytes in both",
			got.Len(), len(c.GetText()), c.GetError(), want.Len())
	}
	if _, err := rs.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the completion: %v, want the RPC's end", err)
	}
	if n := e.srv.relayed.Load() - r0; n > 2 {
		t.Fatalf("the handler relayed %d of %d deltas: the straight budget ran out", n, f.n+1)
	}
}
