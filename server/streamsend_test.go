package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestSubmitStreamDeltasStraight: four long streamed answers (1,000
// numbered deltas each, about 48 KiB of messages in all) and plain
// requests on one SubmitStream whose caller keeps up. Probes keep the
// straight path open past the straight budget and across the plain
// requests' Completions, so nearly every delta goes straight from its
// upstream's reader, not through the sender (relayed); and each request's
// deltas come in order, whole, all before its Completion.
func TestSubmitStreamDeltasStraight(t *testing.T) {
	const streams, plain = 4, 4
	f := &pacedFake{n: 1000, ack: make(chan struct{}, streams), numbered: true}
	e := newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "numbered", Backend: f, MaxConcurrency: streams}),
		batcher.WithRoute(batcher.Route{Name: "numbered", Op: batcher.OpChat, Backend: "numbered"}),
	))
	s := e.openStream(t, testCtx(t))
	r0 := e.srv.relayed.Load()
	for i := range streams {
		r := chatReq("s"+strconv.Itoa(i), "a long answer")
		r.Model, r.Stream = "numbered", true
		s.send(reqMsg(r))
	}
	next := map[string]int{}
	texts := map[string]*strings.Builder{}
	done := map[string]*batcherv1.Completion{}
	for sent := 0; len(done) < streams+plain; {
		m := s.next()
		if c := m.GetCompletion(); c != nil {
			done[c.GetId()] = c
			continue
		}
		d := m.GetDelta()
		if d.GetText() == "" {
			continue // an answer's last delta: the finish reason
		}
		id := d.GetId()
		if done[id] != nil {
			t.Fatalf("a delta of %s after its completion", id)
		}
		if w := strconv.Itoa(next[id]) + " "; d.GetText() != w {
			t.Fatalf("delta %d of %s holds %q, want %q", next[id], id, d.GetText(), w)
		}
		next[id]++
		if texts[id] == nil {
			texts[id] = new(strings.Builder)
		}
		texts[id].WriteString(d.GetText())
		f.ack <- struct{}{}
		if next[id] == 500 && sent < plain { // mid-answer: Completions among the deltas
			s.send(reqMsg(chatReq("p"+strconv.Itoa(sent), "plain")))
			sent++
		}
	}
	for i := range streams {
		id := "s" + strconv.Itoa(i)
		c := done[id]
		if next[id] != f.n || c.GetError() != nil || c.GetText() != texts[id].String() {
			t.Fatalf("%s: %d deltas of %d, completion error %v, its text whole: %v", id, next[id], f.n, c.GetError(), c != nil && c.GetText() == texts[id].String())
		}
	}
	// Some go through the sender all the same: those of a reader that
	// finds another's straight send under way, or the sender sending.
	// Without probes, some 3,000 would.
	if n, total := e.srv.relayed.Load()-r0, streams*(f.n+1); n > int64(total/4) {
		t.Fatalf("the sender relayed %d of %d deltas: the straight path closed", n, total)
	}
}
