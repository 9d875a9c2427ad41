package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/server"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The load shapes of the gRPC targets.
const (
	unaryCallers = 50
	streamCount  = 64
)

// echoServer is the bare baseline: the BatcherService's own messages, with
// every request answered at once by a fixed Completion.
type echoServer struct {
	batcherv1.UnimplementedBatcherServiceServer
}

func echoCompletion(id string) *batcherv1.Completion {
	return &batcherv1.Completion{Id: id, Output: &batcherv1.Completion_Text{Text: "ok"}}
}

func (echoServer) Submit(_ context.Context, in *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
	return &batcherv1.SubmitResponse{Completion: echoCompletion(in.GetRequest().GetId())}, nil
}

func (echoServer) SubmitStream(s batcherv1.BatcherService_SubmitStreamServer) error {
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		r := m.GetRequest()
		if r == nil {
			continue
		}
		out := &batcherv1.SubmitStreamResponse{Kind: &batcherv1.SubmitStreamResponse_Completion{Completion: echoCompletion(r.GetId())}}
		if err := s.Send(out); err != nil {
			return err
		}
	}
}

// target is one service under load: a gRPC server on a loopback port and the
// load client's connection to it.
type target struct {
	client batcherv1.BatcherServiceClient
	stop   func()
}

// serve starts gs on 127.0.0.1 after register has added its service, and
// dials it. stop ends both, then runs cleanup.
func serve(tb testing.TB, gs *grpc.Server, register func(*grpc.Server), cleanup func()) *target {
	tb.Helper()
	register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	return &target{
		client: batcherv1.NewBatcherServiceClient(cc),
		stop: func() {
			_ = cc.Close()
			if cleanup != nil {
				cleanup()
			}
			gs.Stop()
			<-served
		},
	}
}

func serveEcho(tb testing.TB) *target {
	return serve(tb, grpc.NewServer(), func(gs *grpc.Server) {
		batcherv1.RegisterBatcherServiceServer(gs, echoServer{})
	}, nil)
}

// serveBatcher serves the BatcherService in front of a core whose backend
// answers at once. withInterceptors chooses the service's own grpc.Server
// (server.NewGRPCServer: otelgrpc stats handler and panic recovery, as
// batcherd runs it) over a bare grpc.NewServer.
func serveBatcher(tb testing.TB, withInterceptors bool) *target {
	tb.Helper()
	var cnt batchCounter
	core := newNoopCore(tb, &cnt)
	srv := server.New(core)
	gs := grpc.NewServer()
	if withInterceptors {
		// As batcherd runs it without tracing (cmd/batcherd/main.go).
		gs = server.NewGRPCServer(noop.NewTracerProvider())
	}
	return serve(tb, gs, srv.Register, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
	})
}

// newRequest is the request every load client sends: a short completion
// prompt for the route "m" of newNoopCore.
func newRequest(id string) *batcherv1.Request {
	return &batcherv1.Request{
		Id:    id,
		Model: "m",
		Input: &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: "hello"}},
	}
}

// unaryLoad makes n Submit calls from callers goroutines and returns how
// long they took.
func unaryLoad(b *testing.B, t *target, callers, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	for i := range callers {
		k := share(n, callers, i)
		wg.Go(func() {
			req := &batcherv1.SubmitRequest{Request: newRequest("")}
			for range k {
				resp, err := t.client.Submit(ctx, req)
				if err == nil && resp.GetCompletion().GetText() != "ok" {
					err = fmt.Errorf("completion %v, want text %q", resp.GetCompletion(), "ok")
				}
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if first != nil {
		b.Fatal(first)
	}
	return d
}

// streamLoad sends n requests over streams streams, each pipelining its
// share as fast as flow control allows, and returns how long it took until
// every completion had arrived.
func streamLoad(b *testing.B, t *target, streams, n int) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Options{
		Options: &batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS},
	}}
	ss := make([]batcherv1.BatcherService_SubmitStreamClient, streams)
	for i := range ss {
		s, err := t.client.SubmitStream(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Send(opts); err != nil {
			b.Fatal(err)
		}
		ss[i] = s
	}
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	fail := func(err error) {
		errMu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		errMu.Unlock()
	}
	start := time.Now()
	for i, s := range ss {
		k := share(n, streams, i)
		wg.Go(func() {
			for j := range k {
				m := &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: newRequest(strconv.Itoa(j))}}
				if err := s.Send(m); err != nil {
					fail(fmt.Errorf("stream %d send: %w", i, err))
					return
				}
			}
			if err := s.CloseSend(); err != nil {
				fail(fmt.Errorf("stream %d close send: %w", i, err))
			}
		})
		wg.Go(func() {
			got := 0
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					fail(fmt.Errorf("stream %d receive: %w", i, err))
					return
				}
				if c := m.GetCompletion(); c != nil {
					if c.GetText() != "ok" {
						fail(fmt.Errorf("stream %d: completion %v, want text %q", i, c, "ok"))
						return
					}
					got++
				}
				if r := m.GetRejection(); r != nil {
					fail(fmt.Errorf("stream %d: rejection %v", i, r))
					return
				}
			}
			if got != k {
				fail(fmt.Errorf("stream %d: %d completions, want %d", i, got, k))
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if first != nil {
		b.Fatal(first)
	}
	return d
}

// compareRounds is how many slices compare interleaves the two loads in, so
// that a noisy neighbour on a shared machine slows both alike.
const compareRounds = 10

// compare runs the same load against the bare echo and the Batcher in one
// benchmark run, b.N requests each, interleaved in rounds, and reports both
// rates and their ratio. One op is one request to each service.
func compare(b *testing.B, unit string, load func(*testing.B, *target, int) time.Duration, batcherT func() *target) {
	echo := serveEcho(b)
	defer echo.stop()
	bt := batcherT()
	defer bt.stop()
	// Warm both connections and both servers before timing.
	load(b, echo, 256)
	load(b, bt, 256)
	b.ReportAllocs()
	b.ResetTimer()
	var de, db time.Duration
	for r := range compareRounds {
		n := share(b.N, compareRounds, r)
		if n == 0 {
			continue
		}
		// Each phase starts with a clean heap, so that neither pays for
		// the other's garbage.
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		de += load(b, echo, n)
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		db += load(b, bt, n)
	}
	b.StopTimer()
	re := float64(b.N) / de.Seconds()
	rb := float64(b.N) / db.Seconds()
	b.ReportMetric(re, "echo-"+unit+"/s")
	b.ReportMetric(rb, "batcher-"+unit+"/s")
	b.ReportMetric(rb/re, "ratio")
}

// BenchmarkGRPCUnary compares Submit with a bare unary echo of the same
// messages: 50 concurrent callers on one loopback connection.
func BenchmarkGRPCUnary(b *testing.B) {
	load := func(b *testing.B, t *target, n int) time.Duration { return unaryLoad(b, t, unaryCallers, n) }
	for _, ic := range []bool{false, true} {
		b.Run("server="+serverName(ic), func(b *testing.B) {
			compare(b, "req", load, func() *target { return serveBatcher(b, ic) })
		})
	}
}

// BenchmarkGRPCStream compares SubmitStream (completions only) with a bare
// bidirectional echo of the same messages: 64 streams on one loopback
// connection.
func BenchmarkGRPCStream(b *testing.B) {
	load := func(b *testing.B, t *target, n int) time.Duration { return streamLoad(b, t, streamCount, n) }
	for _, ic := range []bool{false, true} {
		b.Run("server="+serverName(ic), func(b *testing.B) {
			compare(b, "msg", load, func() *target { return serveBatcher(b, ic) })
		})
	}
}

func serverName(withInterceptors bool) string {
	if withInterceptors {
		return "batcherd"
	}
	return "bare"
}
