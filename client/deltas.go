package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// deltaQueue holds a streamed request's deltas until its caller takes
// them. The stream's receiver appends; the caller takes. Deltas a caller
// never reads stay until the handle is dropped: the Completion holds the
// whole text anyway, and the service bounds what it buffers per request.
type deltaQueue struct {
	mu     sync.Mutex
	ds     []*batcherv1.Delta
	notify chan struct{} // capacity 1
}

func (q *deltaQueue) push(d *batcherv1.Delta) {
	q.mu.Lock()
	q.ds = append(q.ds, d)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *deltaQueue) take(dst []*batcherv1.Delta) []*batcherv1.Delta {
	q.mu.Lock()
	defer q.mu.Unlock()
	dst = append(dst, q.ds...)
	clear(q.ds)
	q.ds = q.ds[:0]
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
