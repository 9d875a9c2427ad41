package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Stream multiplexes many requests over one SubmitStream RPC.
//
// Ownership: writers (Send, Flush, Handle.Cancel, Close) take turns through
// sendSem, because gRPC forbids concurrent SendMsg and CloseSend; waiting for
// a turn honours the caller's context. One receive goroutine (recvLoop) owns
// reading: it routes every message by request id, runs the callbacks, and is
// the only goroutine that resolves handles. A handle is resolved exactly once,
// by whoever removes it from handles under mu; so handles holds only pending
// requests and memory stays bounded by what is in flight.
type Stream struct {
	cfg    streamConfig // read-only
	cs     grpc.BidiStreamingClient[batcherv1.SubmitStreamRequest, batcherv1.SubmitStreamResponse]
	ctx    context.Context         // the RPC's context
	cancel context.CancelCauseFunc // aborts the RPC

	// sendSem is a one-slot semaphore: holding it is the right to write.
	sendSem   chan struct{}
	closeSent bool // guarded by sendSem: CloseSend was called

	mu      sync.Mutex
	handles map[string]*Handle // guarded by mu: pending requests by id; nil once ended
	nextID  uint64             // guarded by mu: the last id number Send assigned
	ended   bool               // guarded by mu: recvLoop has seen the stream end
	err     error              // guarded by mu; written once, when ended is set
	summary *batcherv1.StreamSummary

	done chan struct{} // closed by recvLoop once the stream ended and every handle is resolved
}

// Stream opens a SubmitStream RPC. The stream lives until Close returns, the
// service ends it, or ctx ends; call Close (or cancel ctx) to release it.
//
// When the options ask for it, Stream sends StreamOptions as the first
// message. An invalid option fails Stream with an error naming the field.
// When Stream fails, a channel passed with WithEvents is closed.
func (c *Client) Stream(ctx context.Context, opts ...StreamOption) (*Stream, error) {
	cfg, err := newStreamConfig(opts)
	if err != nil {
		closeEvents(opts)
		return nil, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	cs, err := c.rpc.SubmitStream(sctx, c.callOpts...)
	if err != nil {
		cancel(err)
		closeEvents(opts)
		return nil, err
	}
	s := &Stream{
		cfg:     cfg,
		cs:      cs,
		ctx:     sctx,
		cancel:  cancel,
		sendSem: make(chan struct{}, 1),
		handles: make(map[string]*Handle),
		done:    make(chan struct{}),
	}
	go s.recvLoop()
	if m := cfg.optionsMessage(); m != nil {
		s.sendSem <- struct{}{} // nobody else can hold it yet
		err := s.writeLocked(ctx, m)
		s.unlock()
		if err != nil {
			s.abort(err)
			<-s.done
			return nil, err
		}
	}
	return s, nil
}

func closeEvents(opts []StreamOption) {
	var c streamConfig
	for _, o := range opts {
		o(&c)
	}
	if c.events != nil {
		close(c.events)
	}
}

// Send sends req on the stream and returns its handle. It is safe for
// concurrent use.
//
// When req.Id is empty, Send assigns an id unique on the stream; a request
// whose id is already pending on the stream fails with ErrDuplicateID. When
// req carries no traceparent and ctx holds a span context, Send sets the
// request's W3C trace context from ctx. Send never modifies req: it sends a
// copy when it must set a field, so one request may be sent many times. As
// with any gRPC message, do not modify req once it is passed to Send.
//
// Send blocks while gRPC flow control holds the stream, which is what the
// service does when the stream's in-flight window is full. ctx bounds only
// the send, not the request: if ctx ends while Send waits for its turn, Send
// returns ctx's error and the stream is untouched; if ctx ends while the
// message is inside gRPC, a stream cannot take back part of a message, so the
// stream is aborted: Send returns ctx's error and every pending handle
// resolves with ErrStreamBroken. Use WithTimeout to bound the request.
func (s *Stream) Send(ctx context.Context, req *batcherv1.Request) (*Handle, error) {
	if req == nil {
		return nil, errors.New("client: Send: request is nil")
	}
	auto := req.GetId() == ""
	var tp, ts string
	if req.GetTraceparent() == "" {
		tp, ts = traceContext(ctx)
	}
	if auto || tp != "" {
		req = proto.CloneOf(req)
		if tp != "" {
			req.Traceparent, req.Tracestate = tp, ts
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.unlock()
	if s.closeSent {
		return nil, ErrClosed
	}
	h, err := s.register(req, auto)
	if err != nil {
		return nil, err
	}
	m := &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: req}}
	if err := s.writeLocked(ctx, m); err != nil {
		s.take(h.id) // never sent, or the stream is gone: nobody waits on h
		return nil, err
	}
	return h, nil
}

// Flush asks the service to send every partial batch now instead of waiting
// out batch windows. ctx bounds the send as in Send.
func (s *Stream) Flush(ctx context.Context) error {
	return s.write(ctx, &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Flush{Flush: &batcherv1.Flush{}}})
}

// Summary returns the last StreamSummary the service sent, nil before the
// first. After a clean Close it is the final one. Treat it as read-only.
func (s *Stream) Summary() *batcherv1.StreamSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.summary
}

// Close half-closes the stream and drains it: it waits until the service has
// answered every pending request and ended the stream, and returns the
// stream's final error, nil when the service ended it with OK after
// answering everything. Every handle is resolved when Close returns.
//
// Close does not flush: a request still waiting for batch-mates leaves when
// its batch would have (at the latest the route's max wait). Call Flush
// first to send such batches at once.
//
// If ctx ends first, Close aborts the stream (pending handles resolve with
// ErrStreamBroken) and returns the resulting error, which wraps ctx's cause.
// Close may be called more than once and concurrently; each call returns the
// same final error.
func (s *Stream) Close(ctx context.Context) error {
	select {
	case <-s.done:
		return s.finalErr()
	default:
	}
	if err := s.lock(ctx); err != nil {
		return s.abortAndWait(ctx)
	}
	if !s.closeSent {
		s.closeSent = true
		// CloseSend is a write too: it can wait for flow control.
		stop := context.AfterFunc(ctx, func() { s.abort(fmt.Errorf("client: Close: %w", context.Cause(ctx))) })
		_ = s.cs.CloseSend() // its outcome arrives on the receive side
		stop()
	}
	s.unlock()
	select {
	case <-s.done:
		return s.finalErr()
	case <-ctx.Done():
		return s.abortAndWait(ctx)
	}
}

func (s *Stream) abortAndWait(ctx context.Context) error {
	s.abort(fmt.Errorf("client: Close: %w", context.Cause(ctx)))
	<-s.done
	return s.finalErr()
}

func (s *Stream) finalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// abort ends the RPC; recvLoop then resolves every pending handle.
func (s *Stream) abort(cause error) { s.cancel(cause) }

// lock takes the right to write, or returns ctx's error.
func (s *Stream) lock(ctx context.Context) error {
	select {
	case s.sendSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (s *Stream) unlock() { <-s.sendSem }

// write sends one message, taking its turn first.
func (s *Stream) write(ctx context.Context, m *batcherv1.SubmitStreamRequest) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	if s.closeSent {
		return ErrClosed
	}
	return s.writeLocked(ctx, m)
}

// writeLocked sends m; the caller holds sendSem. See Send for what ctx does.
func (s *Stream) writeLocked(ctx context.Context, m *batcherv1.SubmitStreamRequest) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := s.endedErr(); err != nil {
		return err
	}
	var err error
	if ctx.Done() == nil { // ctx cannot end: nothing to watch
		err = s.cs.SendMsg(m)
	} else {
		stop := context.AfterFunc(ctx, func() { s.abort(fmt.Errorf("client: send abandoned: %w", context.Cause(ctx))) })
		err = s.cs.SendMsg(m)
		if !stop() {
			return context.Cause(ctx)
		}
	}
	if errors.Is(err, io.EOF) {
		// The stream has ended; its status arrives on the receive side.
		select {
		case <-s.done:
			return s.endedErr()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return err
}

// endedErr is what a write gets once the stream has ended, nil before.
func (s *Stream) endedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endedErrLocked()
}

func (s *Stream) endedErrLocked() error {
	switch {
	case !s.ended:
		return nil
	case s.err == nil:
		return ErrClosed
	default:
		return fmt.Errorf("%w: %w", ErrStreamBroken, s.err)
	}
}

// register adds a pending handle for req, assigning req.Id when auto.
func (s *Stream) register(req *batcherv1.Request, auto bool) (*Handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.endedErrLocked(); err != nil {
		return nil, err
	}
	if auto {
		for {
			s.nextID++
			req.Id = "r" + strconv.FormatUint(s.nextID, 10)
			if _, taken := s.handles[req.Id]; !taken {
				break
			}
		}
	} else if _, taken := s.handles[req.Id]; taken {
		return nil, fmt.Errorf("%w: %q", ErrDuplicateID, req.Id)
	}
	h := &Handle{id: req.Id, s: s, done: make(chan struct{})}
	h.deltas.notify = make(chan struct{}, 1)
	s.handles[h.id] = h
	return h, nil
}

// handle returns the pending handle id, nil when there is none.
func (s *Stream) handle(id string) *Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handles[id]
}

// take removes and returns the pending handle id, nil when there is none.
func (s *Stream) take(id string) *Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[id]
	if h != nil {
		delete(s.handles, id)
	}
	return h
}

func (s *Stream) recvLoop() {
	for {
		m, err := s.cs.Recv()
		if err != nil {
			s.finish(err)
			return
		}
		s.route(m)
	}
}

func (s *Stream) route(m *batcherv1.SubmitStreamResponse) {
	switch k := m.GetKind().(type) {
	case *batcherv1.SubmitStreamResponse_Event:
		if s.cfg.onEvent != nil {
			s.cfg.onEvent(k.Event)
		}
		if s.cfg.events != nil {
			select {
			case s.cfg.events <- k.Event:
			case <-s.ctx.Done():
			}
		}
	case *batcherv1.SubmitStreamResponse_Delta:
		if h := s.handle(k.Delta.GetId()); h != nil {
			h.deltas.push(k.Delta)
		}
	case *batcherv1.SubmitStreamResponse_Completion:
		if h := s.take(k.Completion.GetId()); h != nil {
			h.resolve(k.Completion, completionErr(k.Completion))
		}
	case *batcherv1.SubmitStreamResponse_Rejection:
		if id := k.Rejection.GetId(); id != "" {
			if h := s.take(id); h != nil {
				h.resolve(nil, rejectionErr(k.Rejection))
				return
			}
		}
		if s.cfg.onRejection != nil {
			s.cfg.onRejection(k.Rejection)
		}
	case *batcherv1.SubmitStreamResponse_Summary:
		s.mu.Lock()
		s.summary = k.Summary
		s.mu.Unlock()
		if s.cfg.onSummary != nil {
			s.cfg.onSummary(k.Summary)
		}
	}
}

// finish records how the stream ended and resolves every pending handle.
func (s *Stream) finish(recvErr error) {
	final := recvErr
	if errors.Is(recvErr, io.EOF) {
		final = nil
	} else if s.ctx.Err() != nil {
		if cause := context.Cause(s.ctx); !errors.Is(s.ctx.Err(), cause) {
			final = fmt.Errorf("%w (stream aborted: %w)", recvErr, cause)
		}
	}
	s.mu.Lock()
	pending := s.handles
	s.handles = nil
	if final == nil && len(pending) > 0 {
		final = status.Errorf(codes.Internal, "client: service ended the stream with OK leaving %d requests unanswered", len(pending))
	}
	s.ended, s.err = true, final
	s.mu.Unlock()
	for _, h := range pending {
		h.resolve(nil, fmt.Errorf("%w: %w", ErrStreamBroken, final))
	}
	s.cancel(nil) // release the RPC
	if s.cfg.events != nil {
		close(s.cfg.events)
	}
	close(s.done)
}

// traceContext returns the W3C trace context of ctx's span, if it has one.
func traceContext(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent"), c.Get("tracestate")
}
