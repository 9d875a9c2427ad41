package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// limitsEnv serves two routes: "held", whose backend holds every request
// until the test ends, and routeChat, answered at once.
func limitsEnv(t *testing.T, opts ...Option) (*Server, batcherv1.BatcherServiceClient, *fakeBackend) {
	t.Helper()
	held, quick := heldFake(), newFake()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "held", Backend: held, MaxConcurrency: 1000}),
		batcher.WithBackend(batcher.BackendConfig{Name: "quick", Backend: quick}),
		batcher.WithRoute(batcher.Route{Name: "held", Op: batcher.OpChat, Backend: "held",
			Batch: batcher.BatchConfig{Window: time.Millisecond, MaxBatchSize: 1}}),
		batcher.WithRoute(batcher.Route{Name: routeChat, Op: batcher.OpChat, Backend: "quick",
			Batch: batcher.BatchConfig{Window: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(core, append([]Option{WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(nil)
	srv.Register(gs)
	conn, stop := serveBuf(t, gs)
	t.Cleanup(func() {
		_ = conn.Close()
		held.Release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		stop()
	})
	return srv, batcherv1.NewBatcherServiceClient(conn), held
}

func heldReq(id string) *batcherv1.Request {
	r := chatReq(id, "x")
	r.Model = "held"
	return r
}

// TestPendingBudget: a stream whose answers are owed (its requests held)
// stops being read once the server-wide budget is spent, though its own
// window has room; another stream still gets its floor and completes.
func TestPendingBudget(t *testing.T) {
	const budget, window = 8, 64
	srv, client, held := limitsEnv(t, WithMaxPendingMessages(budget), WithStreamWindow(window))
	ctx := testCtx(t)
	a, err := client.SubmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	aSent := make(chan struct{})
	go func() { // the server stops reading; these sends then block
		defer close(aSent)
		for i := range window {
			if a.Send(reqMsg(heldReq(fmt.Sprint("a", i)))) != nil {
				return
			}
		}
	}()
	held.waitStarted(t, budget)

	b, err := client.SubmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	bSent := make(chan struct{})
	go func() {
		defer close(bSent)
		for i := range n {
			if b.Send(reqMsg(chatReq(fmt.Sprint("b", i), "x"))) != nil {
				return
			}
		}
	}()
	for done := 0; done < n; {
		m, err := b.Recv()
		if err != nil {
			t.Fatalf("stream b: %v after %d completions", err, done)
		}
		if m.GetCompletion() != nil {
			done++
		}
	}
	if got := held.requests.Load(); got > budget {
		t.Fatalf("the stream that owes its answers was read %d times; the budget is %d", got, budget)
	}
	if p := srv.PendingMessages(); p > budget+streamFloor {
		t.Fatalf("%d answers pending server-wide, budget %d", p, budget)
	}
	// Once every stream has ended, every token is back.
	held.Release()
	<-aSent // the server reads again as answers go out
	<-bSent
	_ = a.CloseSend()
	_ = b.CloseSend()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if p := srv.PendingMessages(); p != 0 {
		t.Fatalf("%d budget tokens still taken after every stream ended", p)
	}
}

// TestMaxStreams: a stream past the limit is refused with
// RESOURCE_EXHAUSTED naming it; once one ends, another is served.
func TestMaxStreams(t *testing.T) {
	_, client, held := limitsEnv(t, WithMaxStreams(2))
	ctx := testCtx(t)
	var open []batcherv1.BatcherService_SubmitStreamClient
	for i := range 2 {
		s, err := client.SubmitStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(reqMsg(heldReq(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	held.waitStarted(t, 2) // both are being served
	s, err := client.SubmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "too many streams: the server serves at most 2 at once" {
		t.Fatalf("third stream: %v, want RESOURCE_EXHAUSTED naming the limit", err)
	}
	_ = open
}

// TestShutdownWaitsForReceiver: a stream's receiver that took a budget
// token as the stream closed gives it back on its way out, after the
// stream's handler has returned. Deliver, and so Shutdown, waits for it:
// once Shutdown returns no token is left taken and no receiver runs. (CI
// once saw TestPendingBudget find a token still taken after Shutdown.)
func TestShutdownWaitsForReceiver(t *testing.T) {
	srv, client, _ := limitsEnv(t)
	taken, proceed := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(proceed) })
	t.Cleanup(release) // a failed assertion must not leave the receiver held
	var once sync.Once
	srv.testHookBudgetTaken = func() {
		once.Do(func() {
			close(taken)
			<-proceed
		})
	}
	ctx := testCtx(t)
	s, err := client.SubmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(optionsMsg(&batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS})); err != nil {
		t.Fatal(err)
	}
	<-taken // the receiver holds a token the stream does not count yet
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	// The shutdown ends the stream, which owes nothing.
	for {
		if _, err := s.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want UNAVAILABLE", err)
			}
			break
		}
	}
	// Its handler has returned; its receiver has not. (Without the wait,
	// Deliver returns at once: the bound only ends the wait that is right.)
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := srv.Deliver(dctx); err == nil {
		t.Fatal("Deliver returned while a stream's receiver still held a budget token")
	}
	release()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if p := srv.PendingMessages(); p != 0 {
		t.Fatalf("%d budget tokens taken after Shutdown returned", p)
	}
}
