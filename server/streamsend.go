package server

import (
	"sync"
	"sync/atomic"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// streamSends is a SubmitStream's Sends: the sender's (run), and, as each
// streamed request's batcher.DeltaSender (item.TrySendDelta), text deltas
// straight from the upstream's reader while nothing of that request waits
// in its buffer and the sender is idle, which saves each such delta the
// sender's wake-up, as streamedSender does for SubmitStreamed. (Plain
// requests' Completions are the sender's: sent straight from the core's
// delivery, 5c2bc64, they cost the stream benchmark more CPU than the
// wake-ups they saved, in a quiet A/B of 28 alternated rounds.)
//
// mu is held around every Send (gRPC allows one at a time): by the sender
// from each take to the end of its sending, so that a delta sent straight
// never overtakes the deltas of its request the sender took, nor a
// Completion (which the sender takes only once the request has ended,
// after every TrySendDelta of it); TrySendDelta only tries it. A straight
// send never blocks: it goes only while what the stream's queue in gRPC
// may hold counts less than straightBudget, half of grpc-go's write quota.
// The sender's other messages (events, summaries, rejections, a
// Completion completionBytes does not bound) are not counted: after one,
// nothing is known until a probe sent after it is freed (dirty, freed);
// deltas and Completions are counted (msgBytes, completionBytes), and a
// probe every probeAfter bytes of them tells how many gRPC's writer took
// (taken). The
// sender's last message of each take is a probe when none is in flight
// (once the stream has had a streamed request), so that a stream that
// mixes completions with deltas keeps the straight path open. On a
// compressed stream there are no probes, so nothing is ever known taken:
// straight sends go only before the stream's first uncounted message and
// stop for good once straightBudget bytes have gone (as streamedSender
// counts every byte without probes).
type streamSends struct {
	mu     sync.Mutex
	off    bool  // the handler is returning: no Send any more
	probes bool  // the stream is not compressed (probesWork); set before any send
	seq    int64 // messages sent
	bytes  int64 // what the deltas sent count (msgBytes)
	dirty  int64 // seq of the last message not counted, 0 for none

	// streamed is set by the receiver before the stream's first streamed
	// request goes to the core: until then nobody sends straight, and the
	// sender's messages go without probes, which would cost a stream of
	// plain requests for nothing.
	streamed atomic.Bool

	// Set by a probe's Put, on gRPC's writer goroutine or inside a Send
	// (mu may be held): every message up to seq freed, and bytes then, were
	// taken off the stream's queue. probing is true while a probe is in
	// flight.
	freed   atomic.Int64
	taken   atomic.Int64
	probing atomic.Bool
}

// TrySendDelta implements batcher.DeltaSender for a streamed request of
// the stream.
func (it *item) TrySendDelta(d *batcher.Delta) bool {
	st := it.st
	w := &st.sends
	if !w.mu.TryLock() {
		return false // the sender is sending
	}
	defer w.mu.Unlock()
	id := it.req.ID
	if w.off || w.dirty > w.freed.Load() || w.bytes+int64(msgBytes(id, d))-w.taken.Load() > straightBudget {
		return false
	}
	return st.sendDeltaLocked(id, d) == nil
}

// sendDeltaLocked sends d of request id as one Delta message, counted, a
// probe when one is due; sends.mu is held.
func (st *stream) sendDeltaLocked(id string, d *batcher.Delta) error {
	m := new(streamDeltaMsg)
	fillDelta(&m.d, id, d)
	m.k.Delta = &m.d
	m.Kind = &m.k
	return st.sendCountedLocked(&m.SubmitStreamResponse, m, msgBytes(id, d))
}

// sendCountedLocked sends m, which counts at most n bytes on the wire
// (msgBytes, completionBytes), counted, a probe when one is due: some
// message sent uncounted is not known taken, or probeAfter counted bytes
// are not. What is sent unless a probe is msg: m, or a message holding it
// that the codec encodes (streamDeltaMsg). sends.mu is held.
func (st *stream) sendCountedLocked(m *batcherv1.SubmitStreamResponse, msg any, n int) error {
	w := &st.sends
	w.seq++
	w.bytes += int64(n)
	if w.probes && (w.dirty > w.freed.Load() || w.bytes-w.taken.Load() >= probeAfter) && w.probing.CompareAndSwap(false, true) {
		return st.gs.SendMsg(&streamProbe{m: m, w: w, seq: w.seq, mark: w.bytes})
	}
	return st.gs.SendMsg(msg)
}

// sendDoneLocked sends it's Completion: once the stream has had a
// streamed request, counted when completionBytes bounds it (so that its
// deltas' straight path stays open across Completions); else as
// sendLocked does, as on a stream of plain requests alone, which neither
// counts nor probes. sends.mu is held.
func (st *stream) sendDoneLocked(it *item, last bool) error {
	if st.sends.streamed.Load() {
		if n, ok := completionBytes(&it.done.c.c); ok {
			return st.sendCountedLocked(&it.done.r, &it.done.r, n)
		}
	}
	return st.sendLocked(&it.done.r, last)
}

// completionBytes bounds from above what a stream's Completion message
// holding c counts on the wire, as msgBytes does a delta's, and is false
// for a Completion it does not bound cheaply (an embedding, output
// messages, an error with details): such a one goes uncounted, as the
// sender's other messages do. Each field is counted at its longest tag
// and length prefix (TestCompletionBytesBoundsSize).
func completionBytes(c *batcherv1.Completion) (int, bool) {
	if c.Message != nil || len(c.Choices) > 0 {
		return 0, false
	}
	// The envelope, the scalars, usage, timings, time to first token.
	n := 320 + len(c.Id) + len(c.BatchId) + len(c.Backend)
	switch o := c.Output.(type) {
	case nil:
	case *batcherv1.Completion_Text:
		n += 8 + len(o.Text)
	default:
		return 0, false
	}
	if e := c.Error; e != nil {
		if len(e.Details) > 0 {
			return 0, false
		}
		n += 32 + len(e.Message)
	}
	for k, v := range c.Metadata {
		n += 24 + len(k) + len(v)
	}
	return n, true
}

// sendLocked sends m, a message other than a delta, uncounted; a probe
// when last (the take's last message) and none is in flight. sends.mu is
// held.
func (st *stream) sendLocked(m *batcherv1.SubmitStreamResponse, last bool) error {
	w := &st.sends
	w.seq++
	w.dirty = w.seq
	if last && w.probes && w.streamed.Load() && w.probing.CompareAndSwap(false, true) {
		return st.gs.SendMsg(&streamProbe{m: m, w: w, seq: w.seq, mark: w.bytes})
	}
	return st.gs.Send(m)
}

// stopSends waits for a straight send under way and allows no more: gRPC
// allows no Send once the handler has returned.
func (st *stream) stopSends() {
	st.sends.mu.Lock()
	st.sends.off = true
	st.sends.mu.Unlock()
}

// streamProbe is a SubmitStream message sent as a probe: sendProbe's
// mechanism (read it there), for any message of the stream. It is the
// message to everyone but the codec (ProtoReflect).
type streamProbe struct {
	m         *batcherv1.SubmitStreamResponse
	w         *streamSends
	seq, mark int64
}

// ProtoReflect makes the probe its message.
func (p *streamProbe) ProtoReflect() protoreflect.Message { return p.m.ProtoReflect() }

// marshal encodes the probe's message into a buffer that gRPC gives back
// (Put).
func (p *streamProbe) marshal() (mem.BufferSlice, error) { return marshalProbe(p.m, p) }

// Get implements mem.BufferPool; gRPC takes no buffer from a probe.
func (p *streamProbe) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// Put implements mem.BufferPool: gRPC's writer took every message of the
// stream up to the probe.
func (p *streamProbe) Put(bp *[]byte) {
	p.w.taken.Store(p.mark)
	p.w.freed.Store(p.seq)
	p.w.probing.Store(false)
	putProbeBuf(bp)
}
