package client

import (
	"context"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// Handle is one request sent on a Stream. It resolves exactly once: with the
// request's completion, its rejection, or the error that broke the stream.
type Handle struct {
	id   string
	s    *Stream
	done chan struct{}
	// Written once by resolve before done is closed; read-only after.
	comp *batcherv1.Completion
	err  error
	// A streamed request's deltas (deltas.go); written by the receiver.
	deltas deltaQueue
}

func (h *Handle) resolve(c *batcherv1.Completion, err error) {
	h.comp, h.err = c, err
	close(h.done)
}

// ID returns the request's id on the stream.
func (h *Handle) ID() string { return h.id }

// Done is closed once the handle is resolved.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait waits until the handle is resolved, or ctx ends, and returns:
//   - the completion and nil, when the request succeeded;
//   - the completion and its status as a gRPC status error, when the
//     completion carries an error;
//   - nil and a gRPC status error, when the service rejected the request;
//   - nil and an error wrapping ErrStreamBroken and the stream's gRPC status,
//     when the stream ended first.
//
// If ctx ends first, Wait returns ctx's error; the request goes on (see
// Cancel).
func (h *Handle) Wait(ctx context.Context) (*batcherv1.Completion, error) {
	select {
	case <-h.done:
		return h.comp, h.err
	default:
	}
	select {
	case <-h.done:
		return h.comp, h.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Cancel asks the service to cancel the request; its handle then resolves
// with the service's answer, normally a completion with status CANCELLED.
// Cancel does nothing for a resolved handle. It fails with ErrClosed once
// Close has half-closed the stream. ctx bounds the send as in Send.
func (h *Handle) Cancel(ctx context.Context) error {
	if err := h.s.lock(ctx); err != nil {
		return err
	}
	defer h.s.unlock()
	select {
	case <-h.done:
		return nil
	default:
	}
	if h.s.closeSent {
		return ErrClosed
	}
	return h.s.writeLocked(ctx, &batcherv1.SubmitStreamRequest{
		Kind: &batcherv1.SubmitStreamRequest_Cancel{Cancel: &batcherv1.Cancel{Id: h.id}},
	})
}
