package server

// The stream's receiver: it reads a SubmitStream's messages in order,
// within the window and the server-wide budget, and submits requests to
// the core (see stream in stream.go for who owns what).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/clip"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// receive is the receiver loop.
func (st *stream) receive() {
	first := true
	defer func() {
		st.spillFree(st.spare)
		st.spare = nil
		if p := recover(); p != nil {
			st.s.log.ErrorContext(st.ctx, "server: stream receiver panicked", "panic", fmt.Sprint(p))
			st.endReceive(errPanic)
		}
		if first {
			close(st.ready)
		}
	}()
	for {
		if !st.takeWindow() {
			return
		}
		if !st.takeBudget() {
			st.returnWindow(1) // the window token alone
			return
		}
		msg, err := st.gs.Recv()
		if err != nil {
			st.release()
			st.endReceive(err)
			return
		}
		if first {
			first = false
			ok := st.first(msg)
			close(st.ready)
			if !ok {
				return
			}
			continue
		}
		st.handle(msg)
	}
}

// first handles the stream's first message; false ends the stream.
func (st *stream) first(msg *batcherv1.SubmitStreamRequest) bool {
	switch k := msg.GetKind().(type) {
	case *batcherv1.SubmitStreamRequest_Options:
		v, interval, bad := streamOptions(k.Options, st.s.cfg.interval)
		if bad != nil {
			st.fail(bad)
			return false
		}
		st.interval = interval
		st.allEvents.Store(v != batcherv1.Verbosity_VERBOSITY_COMPLETIONS)
		st.release()
		return true
	case *batcherv1.SubmitStreamRequest_Request:
		st.request(k.Request)
		return true
	}
	st.fail(status.New(grpccodes.InvalidArgument, "first message: must be options or a request"))
	return false
}

// fail ends the stream at once with st; only before anything was accepted.
func (st *stream) fail(s *status.Status) {
	st.mu.Lock()
	st.firstErr = s
	st.mu.Unlock()
	st.wake()
}

// endReceive books the end of reading. A half-close lets in-flight requests
// finish; a broken stream cancels them (their completions still go out if
// the stream can send). When the caller went away the sender sees it.
func (st *stream) endReceive(err error) {
	if st.ctx.Err() != nil {
		return
	}
	if errors.Is(err, io.EOF) {
		err = nil
		st.flushOwn() // nothing more will join them: send what waits now
	} else {
		st.s.log.WarnContext(st.ctx, "server: stream receive failed", "err", err)
		st.cancelAll()
		if _, ok := status.FromError(err); !ok {
			err = status.Error(grpccodes.Internal, "receive failed")
		}
	}
	st.mu.Lock()
	st.recvDone, st.recvErr = true, err
	st.mu.Unlock()
	st.wake()
	if h := st.s.testHookRecvDone; h != nil {
		h()
	}
}

// flushOwn sends this stream's queued requests now, and no other
// caller's: they leave in their lanes' next batches, which other callers'
// requests still fill. It does not wait for them to be sent. Their lanes
// read their calls until they have handled the flush: the items stay
// held until then.
func (st *stream) flushOwn() {
	items, calls := st.pin()
	st.s.core.FlushCallsThen(func() { unpin(items) }, calls...)
}

// pin returns the stream's accepted requests that the core holds, and
// their calls, each item held (refs) so that it is not reused while the
// caller uses its call outside mu: unpin them after.
func (st *stream) pin() ([]*item, []*batcher.Call) {
	st.mu.Lock()
	defer st.mu.Unlock()
	items := make([]*item, 0, len(st.items))
	calls := make([]*batcher.Call, 0, len(st.items))
	for _, it := range st.items {
		// In items: the sender still holds it, so refs is not 0.
		if c := it.call.Load(); c != nil {
			it.refs.Add(1)
			items = append(items, it)
			calls = append(calls, c)
		}
	}
	return items, calls
}

// unpin drops the holds pin took.
func unpin(items []*item) {
	for _, it := range items {
		it.unref()
	}
}

// cancelAll cancels every accepted request.
func (st *stream) cancelAll() {
	items, calls := st.pin()
	for _, c := range calls {
		c.Cancel()
	}
	unpin(items)
}

// handle handles a message after the first.
func (st *stream) handle(msg *batcherv1.SubmitStreamRequest) {
	switch k := msg.GetKind().(type) {
	case *batcherv1.SubmitStreamRequest_Request:
		st.request(k.Request)
	case *batcherv1.SubmitStreamRequest_Cancel:
		st.cancel(k.Cancel.GetId())
	case *batcherv1.SubmitStreamRequest_Flush:
		st.flushOwn()
		st.release()
	case *batcherv1.SubmitStreamRequest_Options:
		st.reject(st.ctx, "", invalidArgument("options", "allowed only as the first message"))
	default:
		st.reject(st.ctx, "", invalidArgument("kind", "must be one of options, request, cancel or flush"))
	}
}

// request validates, translates and submits one request.
func (st *stream) request(pr *batcherv1.Request) {
	id := pr.GetId()
	ctx := st.itemContext(pr)
	if bad := st.refused.take(pr); bad != nil { // a field its type does not declare (codec.go)
		st.reject(ctx, id, bad)
		return
	}
	it := st.newItem()
	if bad := toCore(pr, &it.req); bad != nil {
		st.reuse(it)
		st.reject(ctx, id, bad)
		return
	}
	if err := st.s.core.Admit(st.access, &it.req); err != nil {
		st.reuse(it)
		st.reject(ctx, id, toStatus(err))
		return
	}
	it.req.Conn = st.conn
	if id == "" {
		st.reuse(it)
		st.reject(ctx, id, invalidArgument("request.id", "must be set on a stream, where completions carry it"))
		return
	}
	st.mu.Lock()
	if _, dup := st.items[id]; dup {
		st.mu.Unlock()
		st.reuse(it)
		st.reject(ctx, id, invalidArgument("request.id", "duplicate: "+strconv.Quote(clip.String(id))+" is already in flight on this stream"))
		return
	}
	st.items[id] = it
	st.peak = max(st.peak, len(st.items))
	st.submitted++
	st.mu.Unlock()
	it.refs.Store(3) // the sender's, the core's and the receiver's (item.refs)

	it.req.Sink = it
	if it.req.Stream {
		st.sends.streamed.Store(true)
	}
	c, err := st.s.core.Submit(ctx, &it.req)
	if err != nil {
		st.mu.Lock()
		if st.items[id] == it {
			delete(st.items, id)
		}
		st.submitted--
		st.mu.Unlock()
		sts := toStatus(err)
		st.s.logUnexpected(ctx, sts.Code(), id, err)
		st.reject(ctx, id, sts)
		return
	}
	// No lock: close sets gone before it reads the items' calls, so either
	// it sees c or this sees gone (both may cancel: Cancel is idempotent).
	it.call.Store(c)
	if st.gone.Load() {
		c.Cancel()
	}
	if it.req.Stream {
		c.SendDeltasTo(it) // a no-op once the call ended
	}
	it.unref()
}

// cancel cancels the request with the given id.
func (st *stream) cancel(id string) {
	st.mu.Lock()
	var c *batcher.Call
	it := st.items[id]
	if it != nil {
		if c = it.call.Load(); c != nil {
			it.refs.Add(1) // in items: not 0; held while c is used
		}
	}
	st.mu.Unlock()
	if it == nil {
		// Not a request: the rejection's id stays empty (the proto's rule), so
		// that it cannot be taken for a later request reusing the id.
		st.reject(st.ctx, "", status.New(grpccodes.NotFound, "cancel: no request "+strconv.Quote(clip.String(id))+" in flight on this stream"))
		return
	}
	st.release()
	if c != nil {
		c.Cancel() // its Completion carries CANCELLED
		it.unref()
	}
}

// reject queues a Rejection. With a tracer provider it also records a span
// under ctx, so that the rejection shows in the request's trace.
func (st *stream) reject(ctx context.Context, id string, s *status.Status) {
	if st.s.traceRejects {
		_, span := st.s.tracer.Start(ctx, "batcher.reject", trace.WithAttributes(attrRequestID.String(id)))
		span.SetStatus(codes.Error, s.Message())
		span.End()
	}
	m := &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Rejection{
		Rejection: &batcherv1.Rejection{Id: id, Error: s.Proto()},
	}}
	st.mu.Lock()
	st.rejected++
	st.pushLocked(m)
	st.mu.Unlock()
	st.wake()
}

// itemContext returns the context a request is submitted with: the stream's,
// with the request's own trace context as the parent span when it carries
// a valid one.
func (st *stream) itemContext(pr *batcherv1.Request) context.Context {
	if pr.GetTraceparent() == "" {
		return st.ctx
	}
	return st.s.cfg.propagator.Extract(st.ctx, itemCarrier{pr})
}

// itemCarrier reads a request's trace fields as W3C headers.
type itemCarrier struct{ r *batcherv1.Request }

func (c itemCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.r.GetTraceparent()
	case "tracestate":
		return c.r.GetTracestate()
	}
	return ""
}

func (itemCarrier) Set(string, string) {}

func (itemCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }
