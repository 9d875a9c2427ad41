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

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/cputime"
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

// target is one service under load: a gRPC server on a loopback port and the
// load client's connection to it.
type target struct {
	client batcherv1.BatcherServiceClient
	stop   func()
}

// serve starts gs on 127.0.0.1 after register has added its service, and
// dials it (insecure, then dial's options). stop ends both, then runs
// cleanup.
func serve(tb testing.TB, gs *grpc.Server, register func(*grpc.Server), cleanup func(), dial ...grpc.DialOption) *target {
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
	cc, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
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

// serveEcho serves an echo (minimal with a nil template, else shaped) on
// st's server.
func serveEcho(tb testing.TB, template *batcherv1.Completion, st setup) *target {
	tb.Helper()
	bd := st.build(tb)
	return serve(tb, bd.gs, func(gs *grpc.Server) {
		batcherv1.RegisterBatcherServiceServer(gs, &echoServer{template: template})
	}, bd.cleanup)
}

// serveBatcher serves the BatcherService in front of a core whose backend
// answers at once, as st has it, with the server's options opts.
func serveBatcher(tb testing.TB, st setup, opts ...server.Option) *target {
	tb.Helper()
	bd := st.build(tb)
	return serveBatcherOn(tb, bd.gs, bd.cleanup, bd.core, append(bd.server, opts...)...)
}

// serveBatcherOn serves the BatcherService on the grpc.Server gs, in front
// of a core with the extra options coreOpts, with the server's options
// opts. stop runs cleanup (nil: none) last.
func serveBatcherOn(tb testing.TB, gs *grpc.Server, cleanup func(), coreOpts []batcher.Option, opts ...server.Option) *target {
	tb.Helper()
	var cnt batchCounter
	core := newNoopCore(tb, &cnt, coreOpts...)
	srv, err := server.New(core, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return serve(tb, gs, srv.Register, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
		if cleanup != nil {
			cleanup()
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

// compareRounds is how many slices compare interleaves the loads in, so
// that a noisy neighbour on a shared machine slows them alike.
const compareRounds = 10

// compare runs the same load against three services in one benchmark run,
// b.N requests each, interleaved in rounds:
//   - the minimal echo on a bare grpc.Server (the baseline of the ratio);
//   - the shaped echo: an echo answering with a Completion of Batcher's
//     shape, on the same grpc.Server as the Batcher under test, so that it
//     costs what Batcher's answer and server cost with no batching at all;
//   - the Batcher, served as st has it.
//
// It reports the three rates and: ratio, Batcher against the minimal echo
// (issue 7's figure); ceiling, the shaped echo against the minimal echo,
// which is the most any Batcher could reach on this server with these
// answers; and vs-shaped, Batcher against the shaped echo, which is the
// price of the service's own work. One op is one request to each service.
func compare(b *testing.B, unit string, load func(*testing.B, *target, int) time.Duration, st setup) {
	echo := serveEcho(b, nil, setupBare)
	defer echo.stop()
	bt := serveBatcher(b, st)
	defer bt.stop()
	shaped := serveEcho(b, shapedFrom(b, bt), st)
	defer shaped.stop()
	m := alternate(b, load, echo, shaped, bt)
	b.ReportMetric(m[0].rate, "echo-"+unit+"/s")
	b.ReportMetric(m[1].rate, "shaped-"+unit+"/s")
	b.ReportMetric(m[2].rate, "batcher-"+unit+"/s")
	b.ReportMetric(m[2].rate/m[0].rate, "ratio")
	b.ReportMetric(m[1].rate/m[0].rate, "ceiling")
	b.ReportMetric(m[2].rate/m[1].rate, "vs-shaped")
	b.ReportMetric(m[0].cpu, "echo-cpu-ns/"+unit)
	b.ReportMetric(m[1].cpu, "shaped-cpu-ns/"+unit)
	b.ReportMetric(m[2].cpu, "batcher-cpu-ns/"+unit)
	b.ReportMetric(m[2].cpu-m[1].cpu, "extra-cpu-ns/"+unit)
}

// measured is one target's figures from alternate.
type measured struct {
	// rate is requests a second, wall time.
	rate float64
	// cpu is the process's CPU time (user and system, every thread: the
	// load client's, the server's and the runtime's, GC included) a
	// request, over the target's phases. The load client is the same for
	// every target, so the difference between two targets is what their
	// services cost; unlike the rate it holds up under a busy machine.
	cpu float64
}

// alternate runs load against each target, b.N requests each, interleaved
// in compareRounds rounds after a warm-up, and returns each target's rate
// (requests a second) and CPU time a request, in the order given.
func alternate(b *testing.B, load func(*testing.B, *target, int) time.Duration, targets ...*target) []measured {
	// Warm every connection and server before timing.
	for _, t := range targets {
		load(b, t, 256)
	}
	b.ReportAllocs()
	b.ResetTimer()
	d := make([]time.Duration, len(targets))
	cpu := make([]time.Duration, len(targets))
	for r := range compareRounds {
		n := share(b.N, compareRounds, r)
		if n == 0 {
			continue
		}
		for i, t := range targets {
			// Each phase starts with a clean heap, so that none pays for
			// another's garbage.
			b.StopTimer()
			runtime.GC()
			b.StartTimer()
			c := cputime.Process()
			d[i] += load(b, t, n)
			cpu[i] += cputime.Process() - c
		}
	}
	b.StopTimer()
	m := make([]measured, len(targets))
	for i := range d {
		m[i] = measured{rate: float64(b.N) / d[i].Seconds(), cpu: float64(cpu[i]) / float64(b.N)}
	}
	return m
}

// compareSetups are the servers BenchmarkGRPCUnary and BenchmarkGRPCStream
// serve Batcher on; issue 7's targets are for setupBatcherd.
var compareSetups = []setup{setupBare, setupGRPC, setupBatcherd}

func unaryLoadOf(b *testing.B, t *target, n int) time.Duration {
	return unaryLoad(b, t, unaryCallers, n)
}

func streamLoadOf(b *testing.B, t *target, n int) time.Duration {
	return streamLoad(b, t, streamCount, n)
}

// BenchmarkGRPCUnary compares Submit with a bare unary echo of the same
// messages: 50 concurrent callers on one loopback connection.
func BenchmarkGRPCUnary(b *testing.B) {
	for _, st := range compareSetups {
		b.Run("server="+st.name(), func(b *testing.B) {
			compare(b, "req", unaryLoadOf, st)
		})
	}
}

// BenchmarkGRPCStream compares SubmitStream (completions only) with a bare
// bidirectional echo of the same messages: 64 streams on one loopback
// connection.
func BenchmarkGRPCStream(b *testing.B) {
	for _, st := range compareSetups {
		b.Run("server="+st.name(), func(b *testing.B) {
			compare(b, "msg", streamLoadOf, st)
		})
	}
}

// BenchmarkGRPCAlone runs the load of BenchmarkGRPCUnary or
// BenchmarkGRPCStream against one service on batcherd's server alone:
// the shaped echo or Batcher. It is for profiles, which an alternated run
// would mix: go test -bench 'GRPCAlone/batcher/stream' -cpuprofile
// cpu.out, then the same for shaped, and compare. It reports the rate and
// the process's CPU time a request (the load client's included).
func BenchmarkGRPCAlone(b *testing.B) {
	loads := []struct {
		name string
		load func(*testing.B, *target, int) time.Duration
	}{{"unary", unaryLoadOf}, {"stream", streamLoadOf}}
	for _, svc := range []string{"shaped", "batcher"} {
		for _, ld := range loads {
			b.Run(svc+"/"+ld.name, func(b *testing.B) {
				bt := serveBatcher(b, setupBatcherd)
				defer bt.stop()
				t := bt
				if svc == "shaped" {
					t = serveEcho(b, shapedFrom(b, bt), setupBatcherd)
					defer t.stop()
				}
				m := alternate(b, ld.load, t)
				b.ReportMetric(m[0].rate, "req/s")
				b.ReportMetric(m[0].cpu, "cpu-ns/req")
			})
		}
	}
}

// BenchmarkGRPCLayer measures what one of batcherd's layers costs Batcher
// as batcherd serves it (setupBatcherd): the unary and the stream load
// against Batcher on setupBatcherd without the layer and with it,
// alternated in rounds; ratio is the rate with the layer against the rate
// without. The layers: security (the default configuration's: no TLS, no
// authentication, but its interceptors on every call), metrics
// (telemetry.Setup's MeterProvider for otelgrpc and the core; issue 10
// allows them 5%), and the access log at info (server.AccessLog, off by
// default).
func BenchmarkGRPCLayer(b *testing.B) {
	noSecurity := setupBatcherd
	noSecurity.security = false
	noMetrics := setupBatcherd
	noMetrics.metrics = false
	withLog := setupBatcherd
	withLog.accessLog = true
	layers := []struct {
		name          string
		without, with setup
	}{
		{"security", noSecurity, setupBatcherd},
		{"metrics", noMetrics, setupBatcherd},
		{"accesslog", setupBatcherd, withLog},
	}
	loads := []struct {
		name string
		load func(*testing.B, *target, int) time.Duration
	}{{"unary", unaryLoadOf}, {"stream", streamLoadOf}}
	for _, l := range layers {
		for _, ld := range loads {
			b.Run(l.name+"/"+ld.name, func(b *testing.B) {
				without := serveBatcher(b, l.without)
				defer without.stop()
				with := serveBatcher(b, l.with)
				defer with.stop()
				m := alternate(b, ld.load, without, with)
				b.ReportMetric(m[0].rate, "without")
				b.ReportMetric(m[1].rate, "with")
				b.ReportMetric(m[1].rate/m[0].rate, "ratio")
				b.ReportMetric(m[0].cpu, "without-cpu-ns/op")
				b.ReportMetric(m[1].cpu, "with-cpu-ns/op")
			})
		}
	}
}

// BenchmarkGRPCStreamBudget measures what the server-wide stream budget
// (server.DefaultMaxPendingMessages answers owed) costs the load of
// BenchmarkGRPCStream on a bare server: 64 streams of window 256 can owe
// 16,384 answers, and the default budget lets them owe 1,024 (plus a floor
// of 2 a stream), so the server stops reading them in turn. The core's
// queue, like every benchmark's here, is sized past the load. Both servers
// alternate in rounds; ratio is the default budget's rate against the
// sized one's.
func BenchmarkGRPCStreamBudget(b *testing.B) {
	def := serveBatcher(b, setupBare)
	defer def.stop()
	sized := serveBatcher(b, setupBare, server.WithMaxPendingMessages(streamCount*server.DefaultStreamWindow))
	defer sized.stop()
	m := alternate(b, streamLoadOf, def, sized)
	rd, rs := m[0].rate, m[1].rate
	b.ReportMetric(rd, "default-msg/s")
	b.ReportMetric(rs, "sized-msg/s")
	b.ReportMetric(rd/rs, "ratio")
}

// BenchmarkGRPCUnaryPool measures the worker pool of server.NewGRPCServer
// (it runs RPCs on pooled goroutines, whose stacks stay grown): the load of
// BenchmarkGRPCUnary against Batcher on that server as it is, and with the
// pool turned off (grpc.NumStreamWorkers(0) after it), alternated in
// rounds; ratio is the pooled server's rate against the other's.
func BenchmarkGRPCUnaryPool(b *testing.B) {
	tp := noop.NewTracerProvider()
	pooled := serveBatcherOn(b, server.NewGRPCServer(tp), nil, nil)
	defer pooled.stop()
	plain := serveBatcherOn(b, server.NewGRPCServer(tp, grpc.NumStreamWorkers(0)), nil, nil)
	defer plain.stop()
	m := alternate(b, unaryLoadOf, pooled, plain)
	b.ReportMetric(m[0].rate, "pooled-req/s")
	b.ReportMetric(m[1].rate, "unpooled-req/s")
	b.ReportMetric(m[0].rate/m[1].rate, "ratio")
}
