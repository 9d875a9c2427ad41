package client

import (
	"errors"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// ErrClosed is returned by a Stream's Send, Flush and Handle.Cancel after
	// Close has half-closed the stream.
	ErrClosed = errors.New("client: stream is closed for sending")

	// ErrStreamBroken wraps the error that ended a stream before a request's
	// terminal result arrived: the server failed the stream, the stream's
	// context ended, or the server ended it without answering the request.
	// The wrapped error is a gRPC status error, so status.Code still works.
	ErrStreamBroken = errors.New("client: stream ended before the request completed")

	// ErrDuplicateID is returned by Send for a request whose id is already in
	// flight on the stream. An id is free again once its handle is resolved.
	ErrDuplicateID = errors.New("client: request id already in flight on this stream")
)

// completionErr is the error a failed completion carries, nil on success.
func completionErr(c *batcherv1.Completion) error {
	if c.GetError() == nil {
		return nil
	}
	return status.ErrorProto(c.GetError())
}

// rejectionErr is the error of a rejected request. A rejection always fails
// its request, even when the server left its status empty.
func rejectionErr(r *batcherv1.Rejection) error {
	if err := status.ErrorProto(r.GetError()); err != nil {
		return err
	}
	return status.Error(codes.Unknown, "client: request rejected without a status")
}
