package server

import (
	"context"
	"errors"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
)

// Submit runs one request to its end. The RPC's context bounds it: its
// deadline is the request's, its cancellation cancels the request, and its
// span (from otelgrpc) parents the request's span. The request's own
// traceparent field is ignored here.
func (s *Server) Submit(ctx context.Context, in *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
	m := new(submitReply) // the request and its reply in one allocation
	req := &m.req
	if st := toCore(in.GetRequest(), req); st != nil {
		return nil, st.Err()
	}
	if req.Stream {
		return nil, invalidArgument("request.stream", "Submit answers whole: read a streamed request's deltas with SubmitStreamed or SubmitStream").Err()
	}
	if err := s.core.Admit(s.accessOf(ctx), req); err != nil {
		return nil, toStatus(err).Err()
	}
	req.Conn = connOf(ctx)
	if req.ID == "" {
		req.ID = s.newIDIn(&m.id)
	}
	res, err := s.core.Do(ctx, req)
	if err != nil {
		st := toStatus(err)
		s.logUnexpected(ctx, st.Code(), req.ID, err)
		return nil, st.Err()
	}
	m.r.Completion = m.c.fill(req, &res)
	return &m.r, nil
}

// submitReply is a Submit's core request, its SubmitResponse, its
// Completion and the id the server gives a request that came without one,
// in one allocation. The core holds req until the call's end; the block
// lives that long, and as long as anything keeps the id. Nothing writes id
// once the id string is made from it.
type submitReply struct {
	req batcher.Request
	r   batcherv1.SubmitResponse
	c   completionMsg
	id  idBuf
}

// logUnexpected logs the cause of a failure whose status hides it.
func (s *Server) logUnexpected(ctx context.Context, code codes.Code, id string, err error) {
	switch code {
	case codes.Internal, codes.Unknown:
		attrs := []any{"id", id, "code", code.String(), "err", err}
		var ue *batcher.UpstreamError
		if errors.As(err, &ue) && ue.Err != nil {
			attrs = append(attrs, "cause", ue.Err)
		}
		s.log.WarnContext(ctx, "server: request failed", attrs...)
	}
}
