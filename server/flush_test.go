package server

import (
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// submitted waits until the stream's receiver has handled every message
// sent before: a cancel of an unknown id is answered only after them.
func (s *streamClient) submitted() {
	s.t.Helper()
	s.send(cancelMsg("no-such-request"))
	s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetRejection() != nil })
}

func isCompletion(m *batcherv1.SubmitStreamResponse) bool { return m.GetCompletion() != nil }

// TestStreamFlushOnlyItsOwn: a stream's Flush sends that stream's queued
// requests, not another stream's in the same lane.
func TestStreamFlushOnlyItsOwn(t *testing.T) {
	e := newEnv(t, newFake(), withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MinBatchSize: 5, MaxBatchSize: 10}))
	ctx := testCtx(t)
	other := e.openStream(t, ctx)
	other.send(reqMsg(chatReq("b1", "x")))
	other.send(reqMsg(chatReq("b2", "x")))
	other.submitted()

	s := e.openStream(t, ctx)
	s.send(reqMsg(chatReq("a1", "x")))
	s.send(reqMsg(chatReq("a2", "x")))
	s.send(flushMsg)
	for range 2 {
		c := s.until(isCompletion).GetCompletion()
		if c.GetBatchSize() != 2 || (c.GetId() != "a1" && c.GetId() != "a2") {
			t.Fatalf("got %v, want a1 or a2 in a batch of 2 (the flushing stream's own)", c)
		}
	}
	if ids := e.be.waitStarted(t, 2); len(ids) != 2 {
		t.Fatalf("first batch %v, want only a1 and a2", ids)
	}
	// Queued, not Pending: a call counts as pending until just after its
	// completion is handed to the stream, which the client can see first.
	queued := 0
	for _, l := range e.core.Lanes() {
		for _, n := range l.Queued {
			queued += n
		}
	}
	if queued != 2 {
		t.Fatalf("%d requests queued, want the other stream's 2", queued)
	}
	_ = s.CloseSend()
	if _, err := s.drain(); err != nil {
		t.Fatal(err)
	}
	// The other stream's half-close sends its own.
	_ = other.CloseSend()
	msgs, err := other.drain()
	if err != nil {
		t.Fatal(err)
	}
	ta := tallyOf(msgs)
	for _, id := range []string{"b1", "b2"} {
		if c := ta.completions[id]; c == nil || c.GetBatchSize() != 2 || c.GetError() != nil {
			t.Fatalf("%s: %v, want a completion in a batch of 2", id, c)
		}
	}
}

// TestStreamHalfCloseFlushes: a DEFERRABLE request alone does not wait out
// its max wait once its stream half-closes.
func TestStreamHalfCloseFlushes(t *testing.T) {
	e := newEnv(t, newFake(), withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MinBatchSize: 5, MaxBatchSize: 10}))
	s := e.openStream(t, testCtx(t))
	r := chatReq("d", "x")
	r.Priority = batcherv1.Priority_PRIORITY_DEFERRABLE
	s.send(reqMsg(r))
	_ = s.CloseSend()
	msgs, err := s.drain() // bounded by testCtx: an hour's wait would fail it
	if err != nil {
		t.Fatal(err)
	}
	if c := tallyOf(msgs).completions["d"]; c == nil || c.GetError() != nil {
		t.Fatalf("d: %v, want a completion after the half-close", c)
	}
}

// TestStreamFlushKeepsOthersBatchesFull: one stream flushing after every
// request does not shrink another stream's batches. (A flushed request may
// still fill another stream's full batch.)
func TestStreamFlushKeepsOthersBatchesFull(t *testing.T) {
	const size, rounds = 10, 5
	e := newEnv(t, newFake(), withBatch(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MinBatchSize: size, MaxBatchSize: size}))
	ctx := testCtx(t)
	other, flusher := e.openStream(t, ctx), e.openStream(t, ctx)
	for i := range size * rounds {
		other.send(reqMsg(chatReq("o"+itoa(i), "x")))
		if i%size == size/2 {
			flusher.send(reqMsg(chatReq("f"+itoa(i), "x")))
			flusher.send(flushMsg)
			flusher.until(isCompletion)
		}
	}
	_ = other.CloseSend() // sends what is left
	msgs, err := other.drain()
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	for _, c := range tallyOf(msgs).completions {
		if c.GetError() != nil {
			t.Fatalf("%s failed: %v", c.GetId(), c.GetError())
		}
		if c.GetBatchSize() == size {
			full++
		}
	}
	// Only the batch the half-close sent may be short.
	if want := size * (rounds - 1); full < want {
		t.Fatalf("%d of the other stream's %d requests went in full batches, want at least %d: a flush cut its batches short", full, size*rounds, want)
	}
	_ = flusher.CloseSend()
	if _, err := flusher.drain(); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
