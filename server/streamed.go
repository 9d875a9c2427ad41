package server

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/status"
)

// Streamed requests (Request.stream): their deltas reach the caller as
// Delta messages, on SubmitStream interleaved with everything else, or as
// the whole answer of SubmitStreamed.

// DeltasReady implements batcher.DeltaNotifier: a streamed request of the
// stream has deltas waiting. The sender takes them, before the messages
// queued with them, so that they precede the request's Completion. Called
// with the request's delta buffer locked: it only queues the call.
func (st *stream) DeltasReady(c *batcher.Call) {
	st.mu.Lock()
	if !st.closed {
		st.streaming = append(st.streaming, c)
	}
	st.mu.Unlock()
	st.wake()
}

// sendDeltas sends the deltas waiting on the calls of ready, and gives the
// slice back for the next take; sends.mu is held. While a send blocks (the caller reads
// slowly) the deltas wait in the core's bounded buffers, one per request,
// which coalesce and then cancel the request (batcher.ErrStreamOverflow);
// a request found with more than joinAfter deltas waiting is behind, and
// its deltas go as one message (batcher.JoinDeltas), so the completions
// queued behind a take's deltas wait for at most joinAfter messages per
// streamed request in flight, however fast their tokens came.
func (st *stream) sendDeltas(ready []*batcher.Call) error {
	if len(ready) == 0 {
		return nil
	}
	var ds []batcher.Delta
	var err error
	for i, c := range ready {
		ready[i] = nil
		if err != nil {
			continue
		}
		ds, _ = c.Deltas(ds[:0])
		if len(ds) > joinAfter {
			ds = batcher.JoinDeltas(ds)
		}
		st.s.relayed.Add(int64(len(ds)))
		id := c.Request().ID
		for j := range ds {
			if err = st.sendDeltaLocked(id, &ds[j]); err != nil {
				break
			}
		}
		clear(ds)
	}
	st.mu.Lock()
	if st.spareStr == nil {
		st.spareStr = ready[:0]
	}
	st.mu.Unlock()
	return err
}

// joinAfter is how many deltas of one request a SubmitStream sender sends
// as they are; more waiting are joined.
const joinAfter = 16

// streamDeltaMsg and streamedDeltaMsg are a Delta message of SubmitStream
// and of SubmitStreamed, each allocated whole: one allocation a delta, not
// three. A message is never reused once sent (grpc may read it after Send
// returns). Each is sent as itself (SendMsg), a proto message by its
// embedded response, so that the codec writes its encoding into its w
// (deltaWire): with the message, one allocation a delta, where the
// encoding was three more.
type (
	streamDeltaMsg struct {
		batcherv1.SubmitStreamResponse
		k batcherv1.SubmitStreamResponse_Delta
		d batcherv1.Delta
		w deltaWire
	}
	streamedDeltaMsg struct {
		batcherv1.SubmitStreamedResponse
		k batcherv1.SubmitStreamedResponse_Delta
		d batcherv1.Delta
		w deltaWire
	}
)

// fillDelta translates one delta of request id into m, which is zero.
func fillDelta(m *batcherv1.Delta, id string, d *batcher.Delta) {
	m.Id, m.Text, m.Refusal = id, d.Text, d.Refusal
	if len(d.ToolCalls) > 0 {
		m.ToolCalls = make([]*batcherv1.ToolCallDelta, len(d.ToolCalls))
		for i, t := range d.ToolCalls {
			m.ToolCalls[i] = &batcherv1.ToolCallDelta{Index: t.Index, Id: t.ID, Name: t.Name, Arguments: t.Arguments}
		}
	}
	if d.FinishReason != batcher.FinishUnspecified && int(d.FinishReason) < len(finishReasons) {
		m.FinishReason = finishReasons[d.FinishReason]
	}
	if u := d.Usage; u != nil {
		m.Usage = &batcherv1.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.Total()}
	}
}

// SubmitStreamed runs one request streamed: its deltas as they come, then
// its Completion. The RPC's context bounds it as Submit's does; when the
// caller goes away the request is cancelled and its upstream call closed
// at once.
//
// Why a server-streaming RPC beside SubmitStream: for one interactive
// answer it is what gRPC callers expect (a plain iterator in every
// language's generated stub, deadlines and cancellation per call, and one
// status at the end), with no stream of one's own to manage.
func (s *Server) SubmitStreamed(in *batcherv1.SubmitStreamedRequest, ss batcherv1.BatcherService_SubmitStreamedServer) error {
	// The handler's goroutine waits in relay as long as the answer lasts,
	// and its stack is memory every open stream holds: the runtime halves
	// a waiting goroutine's stack at a collection only while it uses less
	// than a quarter of it. So what runs before and after the wait
	// (decoding, admission, the Completion) has frames of its own, which
	// are off the stack while it waits: with the interceptors' and gRPC's
	// frames below, the wait stays under a quarter of 16 KiB, and the
	// stack a handler's work grew to 16 KiB goes back to 8 (bench's
	// BenchmarkStream2000).
	req, c, err := s.startStreamed(in, ss)
	if c == nil {
		return err
	}
	// A no-op once the call ended; else the caller left (relay saw ctx
	// end) or a Send failed: the call is cancelled and its upstream call
	// closed at once.
	defer c.Cancel()
	ctx := ss.Context()
	snd := &streamedSender{ss: ss, id: req.ID, probes: probesWork(ctx), relayed: &s.relayed}
	defer snd.stop()
	c.SendDeltasTo(snd)
	if err := snd.relay(ctx, c); err != nil {
		return err
	}
	return s.endStreamed(ss, req, c)
}

// startStreamed submits in's request, streamed; the call is nil when it
// was refused, with err the RPC's status.
func (s *Server) startStreamed(in *batcherv1.SubmitStreamedRequest, ss batcherv1.BatcherService_SubmitStreamedServer) (*batcher.Request, *batcher.Call, error) {
	ctx := ss.Context()
	req := new(batcher.Request)
	if st := toCore(in.GetRequest(), req); st != nil {
		return nil, nil, st.Err()
	}
	req.Stream = true
	if err := s.core.Admit(s.accessOf(ctx), req); err != nil {
		return nil, nil, toStatus(err).Err()
	}
	req.Conn = connOf(ctx)
	if req.ID == "" {
		req.ID = s.newID()
	}
	c, err := s.core.Submit(ctx, req)
	if err != nil {
		st := toStatus(err)
		s.logUnexpected(ctx, st.Code(), req.ID, err)
		return nil, nil, st.Err()
	}
	return req, c, nil
}

// endStreamed sends the Completion of req's call c, which has its result,
// and returns the RPC's status.
func (s *Server) endStreamed(ss batcherv1.BatcherService_SubmitStreamedServer, req *batcher.Request, c *batcher.Call) error {
	res := c.Result()
	end := new(streamedEndMsg)
	end.k.Completion = end.c.fill(req, &res)
	end.r.Kind = &end.k
	if err := ss.Send(&end.r); err != nil {
		return err
	}
	if res.Err != nil {
		st := toStatus(res.Err)
		s.logUnexpected(ss.Context(), st.Code(), req.ID, res.Err)
		return st.Err()
	}
	return nil
}

// streamedEndMsg is SubmitStreamed's last message, allocated whole.
type streamedEndMsg struct {
	r batcherv1.SubmitStreamedResponse
	k batcherv1.SubmitStreamedResponse_Completion
	c completionMsg
}

// streamedSender sends a SubmitStreamed call's delta messages: the ones
// the handler takes from the core's buffer (relay), and, as the call's
// batcher.DeltaSender, text deltas straight from the upstream's reader
// while nothing waits in that buffer, which saves each such delta a
// hand-off from the reader's goroutine to the handler's.
//
// mu is held around every Send (gRPC allows one at a time), and by the
// handler from each take of waiting deltas to the end of their sending,
// so that a delta sent straight never overtakes them; TrySendDelta only
// tries it, and never waits. A straight send never blocks either: gRPC
// lets a stream queue its write quota (64 KiB in grpc-go) before SendMsg
// waits, and TrySendDelta sends only while the bytes the call has queued
// and gRPC's writer has not yet taken count less than straightBudget,
// half of it. Past that, or while the handler is sending (blocked,
// perhaps, on a caller that does not read), deltas wait in the core's
// bounded buffer, whose coalescing and overflow bound a slow caller as
// before.
//
// What the writer has taken is learnt from probes (sendProbe): every
// probeAfter bytes one message goes out in a buffer of the sender's own,
// which gRPC frees once its writer has taken the message's bytes off the
// stream's queue (and given them back to the write quota); the stream's
// messages leave that queue in order, so every byte sent before the probe
// has left it too. Without probes (a compressed stream: its buffers are
// freed before the writer takes them) nothing is ever known taken, and
// the budget counts every byte the call sends, as it did before probes.
type streamedSender struct {
	ss batcherv1.BatcherService_SubmitStreamedServer
	id string
	// relayed is the server's count of deltas relayed (Server.relayed).
	relayed *atomic.Int64
	// probes is whether sends may carry probes: the stream is not
	// compressed (probesWork). Set before the first send.
	probes bool

	mu      sync.Mutex
	sent    int64 // bytes of the messages sent so far, counted high (msgBytes)
	stopped bool  // the handler is returning: no Send any more

	// taken is what of sent gRPC's writer has taken off the stream's
	// queue, as of the last probe freed; probing is true while a probe is
	// in flight. The probe's Put sets both, on gRPC's writer goroutine or
	// inside a Send (mu may be held): they are atomics.
	taken   atomic.Int64
	probing atomic.Bool
}

// straightBudget is how many bytes of a call's messages may wait in the
// stream's queue (sent, not known taken) before TrySendDelta stops
// sending straight: half of grpc-go's write quota, so that a straight send
// never waits. probeAfter is how many such bytes make the next message a
// probe: a caller that reads keeps the bytes waiting under it, so its
// deltas all go straight however long the answer.
const (
	straightBudget = 32 << 10
	probeAfter     = 8 << 10
)

// TrySendDelta implements batcher.DeltaSender.
func (s *streamedSender) TrySendDelta(d *batcher.Delta) bool {
	if !s.mu.TryLock() {
		return false // the handler is sending
	}
	defer s.mu.Unlock()
	if s.stopped || s.sent+int64(msgBytes(s.id, d))-s.taken.Load() > straightBudget {
		return false
	}
	return s.send(d) == nil
}

// relay sends the deltas that wait in the call's buffer as they come,
// until the call has its result and every delta was taken, or until ctx
// ends (the caller left): it then returns ctx's status, and the handler's
// deferred Cancel closes the upstream call. It watches ctx itself, in the
// select it waits in, rather than through a context.AfterFunc: most deltas
// go straight from the upstream's reader (TrySendDelta) and never wake it,
// so the select costs next to nothing, where an AfterFunc cost every
// stream a context, a registration in the RPC's context and its removal.
func (s *streamedSender) relay(ctx context.Context, c *batcher.Call) error {
	ready, done := c.DeltasReady(), ctx.Done()
	for more := true; more; {
		select {
		case <-ready:
		case <-done:
		}
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		var err error
		if more, err = s.sendWaiting(c); err != nil {
			return err
		}
	}
	return nil
}

// sendWaiting takes the deltas waiting in c's buffer and sends them, and
// reports whether more may come. Its frame, with the deltas taken, is off
// the handler's stack while relay waits (SubmitStreamed).
func (s *streamedSender) sendWaiting(c *batcher.Call) (more bool, err error) {
	// A take is one delta, or a few joined: they fit on the stack.
	var buf [4]batcher.Delta
	s.mu.Lock()
	defer s.mu.Unlock()
	ds, more := c.Deltas(buf[:0])
	if len(ds) > 1 {
		// Deltas that piled up while the last Send ran go as one
		// message: their text is late already, and a message per
		// token would cost the CPU that made it late.
		ds = batcher.JoinDeltas(ds)
	}
	s.relayed.Add(int64(len(ds)))
	for i := range ds {
		if err = s.send(&ds[i]); err != nil {
			break
		}
	}
	return more, err
}

// send sends d as one Delta message, a probe when probeAfter bytes wait
// unknown and none is in flight; mu is held.
func (s *streamedSender) send(d *batcher.Delta) error {
	s.sent += int64(msgBytes(s.id, d))
	if s.probes && s.sent-s.taken.Load() >= probeAfter && s.probing.CompareAndSwap(false, true) {
		p := &sendProbe{s: s, mark: s.sent}
		fillDelta(&p.d, s.id, d)
		p.k.Delta = &p.d
		p.Kind = &p.k
		return s.ss.SendMsg(p)
	}
	m := new(streamedDeltaMsg)
	fillDelta(&m.d, s.id, d)
	m.k.Delta = &m.d
	m.Kind = &m.k
	return s.ss.SendMsg(m)
}

// stop waits for a straight send under way and allows no more: gRPC
// allows no Send once the handler has returned.
func (s *streamedSender) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// msgBytes is at least what d's Delta message of request id counts against
// the stream's write quota: its encoding and gRPC's 5-byte prefix.
func msgBytes(id string, d *batcher.Delta) int {
	n := 32 + len(id) + len(d.Text) + len(d.Refusal)
	for i := range d.ToolCalls {
		t := &d.ToolCalls[i]
		n += 32 + len(t.ID) + len(t.Name) + len(t.Arguments)
	}
	if d.Usage != nil {
		n += 48
	}
	return n
}
