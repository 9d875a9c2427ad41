package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Drain is the first half of Shutdown: health checks answer NOT_SERVING and
// every health Watch ends at once (an idle watcher must not hold the
// shutdown); admission stops (new requests get UNAVAILABLE); the core
// finishes every pending request, or ends it with UNAVAILABLE when ctx ends
// first. When Drain returns, every accepted request has its terminal result
// queued for its caller, but streams may not have sent them yet: Deliver
// waits for that, with a budget of its own.
//
// Drain returns the core's error (one wrapping ctx's when requests had to be
// aborted). Calling it again waits again.
func (s *Server) Drain(ctx context.Context) error {
	s.health.Shutdown()
	s.mu.Lock()
	s.shutting = true
	s.mu.Unlock()
	s.watchesOnce.Do(func() { close(s.watchesEnd) })

	err := s.core.Shutdown(ctx)
	s.closeOnce.Do(func() { close(s.closing) })
	return err
}

// Deliver waits, after Drain, until every SubmitStream has sent the results
// it owes and its final summary and has ended, its receiving goroutine
// too, or until ctx ends; then it
// returns an error naming how many streams were still sending (a stream
// whose caller stopped reading cannot finish). Give it a context of its own,
// not the drain's: when the drain ran out of time, the results of the
// requests it aborted still need a moment to reach their callers.
func (s *Server) Deliver(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("server: %d streams still sending: %w", s.openStreams.Load(), ctx.Err())
	}
}

// OpenStreams reports the SubmitStreams now open.
func (s *Server) OpenStreams() int64 { return s.openStreams.Load() }

// healthServer is grpc's health server with a Watch that ends when the
// drain begins: it sends NOT_SERVING and ends with UNAVAILABLE, so that an
// idle watcher neither holds grpc.Server.GracefulStop nor misses the news.
type healthServer struct {
	*health.Server
	end <-chan struct{} // closed when the drain begins
}

// watchStream gives the inner Watch a context that ends with the drain.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w *watchStream) Context() context.Context { return w.ctx }

func (h *healthServer) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	inner := make(chan error, 1)
	go func() { inner <- h.Server.Watch(in, &watchStream{Health_WatchServer: stream, ctx: ctx}) }()
	select {
	case err := <-inner:
		return err
	case <-h.end:
	}
	cancel()
	<-inner //nolint:errcheck // the inner Watch has stopped sending; its error is the cancellation above
	_ = stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
	return status.Error(codes.Unavailable, "server shutting down")
}

// exitStream unregisters a stream that enterStream registered.
func (s *Server) exitStream() {
	s.openStreams.Add(-1)
	s.streams.Done()
}
