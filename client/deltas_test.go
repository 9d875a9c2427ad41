package client_test

import (
	"strings"
	"testing"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

func simBackend(t *testing.T) batcher.Backend {
	t.Helper()
	p, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHandleDeltas: a streamed request's deltas come through its handle's
// iterator, in order, and make its completion's text; a plain request on
// the same stream has none.
func TestHandleDeltas(t *testing.T) {
	c := serveReal(t, simBackend(t), batcher.BatchConfig{MinBatchSize: 1})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	req := client.Chat("sim-chat", client.User("stream these words to me"))
	req.Stream = true
	h := mustSend(t, s, req)
	plain := mustSend(t, s, client.Chat("sim-chat", client.User("plain")))
	var text strings.Builder
	n := 0
	var last *batcherv1.Delta
	for d, err := range h.Deltas(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(d.GetText())
		last = d
		n++
	}
	comp, err := wait(t, h)
	// The sim answers at once: when its words pile up before the stream's
	// sender takes them (more than 16), they come joined in one delta, so
	// at least the text and the last delta.
	if err != nil || n < 2 || text.String() != comp.GetText() || last.GetFinishReason() == batcherv1.FinishReason_FINISH_REASON_UNSPECIFIED {
		t.Fatalf("%d deltas %q, completion %q, err %v", n, text.String(), comp.GetText(), err)
	}
	for d, err := range plain.Deltas(t.Context()) {
		t.Fatalf("delta %v, err %v for a request not streamed, which succeeded: want nothing", d, err)
	}
	mustClose(t, s)
}

// TestSubmitStreamed: the one-request RPC calls back with each delta and
// returns the completion.
func TestSubmitStreamed(t *testing.T) {
	c := serveReal(t, simBackend(t), batcher.BatchConfig{MinBatchSize: 1})
	var text strings.Builder
	n := 0
	comp, err := c.SubmitStreamed(t.Context(), client.Chat("sim-chat", client.User("one request, streamed")), func(d *batcherv1.Delta) {
		text.WriteString(d.GetText())
		n++
	})
	// The sim answers at once: the words that pile up while a Send runs
	// come joined, so at least the text and the last delta.
	if err != nil || n < 2 || text.String() != comp.GetText() || comp.GetTimeToFirstToken() == nil {
		t.Fatalf("%d deltas %q, completion %v, err %v", n, text.String(), comp, err)
	}
}
