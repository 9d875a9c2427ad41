package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// MaxQueuedDeltas bounds the deltas that wait on one handle for its
// caller (Handle.Deltas). Past it, a text or refusal delta is folded into
// the last one waiting, so a caller who reads slowly, or never, gets
// fewer, larger deltas and the handle holds at most this many messages
// beyond its answer's text (which the service bounds: max_tokens, and its
// own per-request limit on unread deltas). Deltas with tool-call pieces,
// a finish reason or usage are never folded.
const MaxQueuedDeltas = 256

// deltaQueue holds a streamed request's deltas until its caller takes
// them. The stream's receiver appends; the caller takes. It holds at most
// MaxQueuedDeltas messages: past that, text deltas coalesce (push).
type deltaQueue struct {
	mu      sync.Mutex
	ds      []*batcherv1.Delta
	merging bool // ds's last delta's text is in tail, tailRef
	tail    strings.Builder
	tailRef strings.Builder
	notify  chan struct{} // capacity 1
}

// foldable reports whether d holds only text or refusal.
func foldable(d *batcherv1.Delta) bool {
	return len(d.GetToolCalls()) == 0 && d.GetFinishReason() == batcherv1.FinishReason_FINISH_REASON_UNSPECIFIED && d.GetUsage() == nil
}

func (q *deltaQueue) push(d *batcherv1.Delta) {
	q.mu.Lock()
	if n := len(q.ds); n >= MaxQueuedDeltas && foldable(d) && foldable(q.ds[n-1]) {
		// The caller is behind: fold d into the last delta waiting (the
		// queue's own until taken). The builders keep folding linear.
		if !q.merging {
			q.merging = true
			q.tail.WriteString(q.ds[n-1].GetText())
			q.tailRef.WriteString(q.ds[n-1].GetRefusal())
		}
		q.tail.WriteString(d.GetText())
		q.tailRef.WriteString(d.GetRefusal())
	} else {
		q.sealLocked()
		q.ds = append(q.ds, d)
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// sealLocked ends folding: the text folded so far becomes the last
// waiting delta's.
func (q *deltaQueue) sealLocked() {
	if !q.merging {
		return
	}
	last := q.ds[len(q.ds)-1]
	last.Text, last.Refusal = q.tail.String(), q.tailRef.String()
	q.tail, q.tailRef = strings.Builder{}, strings.Builder{}
	q.merging = false
}

func (q *deltaQueue) take(dst []*batcherv1.Delta) []*batcherv1.Delta {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sealLocked()
	dst = append(dst, q.ds...)
	clear(q.ds)
	q.ds = q.ds[:0]
	if cap(q.ds) > 32 {
		q.ds = nil // a burst's array goes
	}
	return dst
}

// Deltas iterates over the deltas of a request sent with stream set, as
// they arrive. It ends once the request is resolved and every delta was
// yielded; when the request failed (or ctx ended) the last pair holds the
// error, as Wait returns it. A request sent without stream yields nothing
// but its error, if any. Only one iteration at a time takes a handle's
// deltas.
//
//	for d, err := range h.Deltas(ctx) {
//		if err != nil { ... }
//		fmt.Print(d.GetText())
//	}
func (h *Handle) Deltas(ctx context.Context) iter.Seq2[*batcherv1.Delta, error] {
	return func(yield func(*batcherv1.Delta, error) bool) {
		var buf []*batcherv1.Delta
		for {
			done := false
			select {
			case <-h.done:
				done = true
			default:
			}
			buf = h.deltas.take(buf[:0])
			for _, d := range buf {
				if !yield(d, nil) {
					return
				}
			}
			if done {
				if h.err != nil {
					yield(nil, h.err)
				}
				return
			}
			if len(buf) > 0 {
				continue
			}
			select {
			case <-h.deltas.notify:
			case <-h.done:
			case <-ctx.Done():
				yield(nil, context.Cause(ctx))
				return
			}
		}
	}
}

// SubmitStreamed sends one request streamed (the SubmitStreamed RPC) and
// calls onDelta with each delta as it arrives, then returns the request's
// Completion, which holds the whole answer. A failure is returned as
// Submit returns it: with the completion when the service sent one (its
// partial field says whether deltas had come), and the error its status
// describes. onDelta runs on the calling goroutine; ctx's end cancels the
// request and closes its upstream call.
func (c *Client) SubmitStreamed(ctx context.Context, req *batcherv1.Request, onDelta func(*batcherv1.Delta), opts ...grpc.CallOption) (*batcherv1.Completion, error) {
	ss, err := c.rpc.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: req}, slices.Concat(c.callOpts, opts)...)
	if err != nil {
		return nil, err
	}
	var comp *batcherv1.Completion
	for {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			if comp == nil {
				return nil, status.Error(codes.Internal, "client: SubmitStreamed ended without a completion")
			}
			return comp, completionErr(comp)
		}
		if err != nil {
			return comp, err // with the completion the service sent first, if any
		}
		switch k := m.GetKind().(type) {
		case *batcherv1.SubmitStreamedResponse_Delta:
			if onDelta != nil {
				onDelta(k.Delta)
			}
		case *batcherv1.SubmitStreamedResponse_Completion:
			comp = k.Completion
		}
	}
}
