package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// shout is a deterministic backend: it answers each chat with its last
// message in capitals.
var shout = batcher.BackendFunc(func(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	for i, r := range b.Requests {
		msgs := r.Input.Messages
		out[i] = batcher.Response{Text: strings.ToUpper(msgs[len(msgs)-1].Content), FinishReason: batcher.FinishStop}
	}
	return nil
})

// startBatcher runs a Batcher service in-process, over an in-memory
// listener, with one chat route "sim-chat" whose batches hold up to three
// requests and wait for them up to an hour (a Flush or a full batch sends
// them sooner). It returns a Client and a function that stops everything.
func startBatcher() (*client.Client, func()) {
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "shout", Backend: shout}),
		batcher.WithRoute(batcher.Route{Name: "sim-chat", Op: batcher.OpChat, Backend: "shout",
			Batch: batcher.BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Hour, MaxWait: time.Hour}}),
	)
	if err != nil {
		panic(err)
	}
	srv, err := server.New(core, server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	gs := server.NewGRPCServer(nil)
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()

	c, err := client.Dial("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	return c, func() {
		_ = c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gs.GracefulStop()
		<-served
	}
}

func ExampleClient_Submit() {
	c, stop := startBatcher()
	defer stop()
	ctx := context.Background()

	comp, err := c.Submit(ctx, client.Chat("sim-chat",
		client.System("You shout."), client.User("hello"),
		client.WithPriority(batcherv1.Priority_PRIORITY_URGENT), // leaves at once, without waiting for batch-mates
		client.WithMaxTokens(16)))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(comp.GetText(), comp.GetFinishReason())

	// Failures are gRPC status errors.
	_, err = c.Submit(ctx, client.Chat("gpt-unknown", client.User("hello")))
	fmt.Println(status.Code(err))
	// Output:
	// HELLO FINISH_REASON_STOP
	// InvalidArgument
}

func ExampleStream() {
	c, stop := startBatcher()
	defer stop()
	ctx := context.Background()

	s, err := c.Stream(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	var handles []*client.Handle
	for _, text := range []string{"one", "two", "three"} {
		h, err := s.Send(ctx, client.Chat("sim-chat", client.User(text)))
		if err != nil {
			fmt.Println(err)
			return
		}
		handles = append(handles, h)
	}
	for _, h := range handles {
		comp, err := h.Wait(ctx)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %s (batch of %d)\n", h.ID(), comp.GetText(), comp.GetBatchSize())
	}
	// Close drains: it returns once every request is answered and the
	// service has ended the stream.
	if err := s.Close(ctx); err != nil {
		fmt.Println(err)
	}
	sum := s.Summary()
	fmt.Println("final:", sum.GetFinal(), "completed:", sum.GetCompleted())
	// Output:
	// r1: ONE (batch of 3)
	// r2: TWO (batch of 3)
	// r3: THREE (batch of 3)
	// final: true completed: 3
}

// Progress events arrive in order for each request, all before its handle
// resolves.
func ExampleOnEvent() {
	c, stop := startBatcher()
	defer stop()
	ctx := context.Background()

	s, err := c.Stream(ctx, client.OnEvent(func(ev *batcherv1.Event) {
		switch k := ev.GetKind().(type) {
		case *batcherv1.Event_Queued:
			fmt.Println(ev.GetId(), "queued")
		case *batcherv1.Event_Batched:
			fmt.Println(ev.GetId(), "batched, size", k.Batched.GetBatchSize())
		case *batcherv1.Event_Dispatched:
			fmt.Println(ev.GetId(), "dispatched to", k.Dispatched.GetBackend())
		}
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := s.Send(ctx, client.Chat("sim-chat", client.User("hi"), client.WithID("greeting")))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A lone request would wait for batch-mates: Flush sends it now.
	if err := s.Flush(ctx); err != nil {
		fmt.Println(err)
	}
	comp, err := h.Wait(ctx)
	fmt.Println(comp.GetText(), err)
	_ = s.Close(ctx)
	// Output:
	// greeting queued
	// greeting batched, size 1
	// greeting dispatched to shout
	// HI <nil>
}

// A rejected request resolves its handle with the service's status and no
// completion; a cancelled one with its completion and CANCELLED.
func ExampleHandle_Wait() {
	c, stop := startBatcher()
	defer stop()
	ctx := context.Background()

	s, err := c.Stream(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	bad, _ := s.Send(ctx, client.Chat("sim-chat", client.User("too hot"), client.WithTemperature(3)))
	comp, err := bad.Wait(ctx)
	fmt.Println(comp == nil, status.Convert(err).Message())

	waiting, _ := s.Send(ctx, client.Chat("sim-chat", client.User("never mind")))
	if err := waiting.Cancel(ctx); err != nil {
		fmt.Println(err)
	}
	comp, err = waiting.Wait(ctx)
	fmt.Println(comp.GetId(), status.Code(err))
	_ = s.Close(ctx)
	// Output:
	// true request.params.temperature: must be 0 to 2, got 3
	// r2 Canceled
}
