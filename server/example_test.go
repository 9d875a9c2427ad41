package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// shout is a Backend that answers each chat with its last message in
// capitals.
var shout = batcher.BackendFunc(func(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	for i, r := range b.Requests {
		msgs := r.Input.Messages
		out[i] = batcher.Response{Text: strings.ToUpper(msgs[len(msgs)-1].Content), FinishReason: batcher.FinishStop}
	}
	return nil
})

// serve starts a Server over an in-memory listener and returns a client and
// a function that shuts everything down gracefully.
func serve(bc batcher.BatchConfig) (batcherv1.BatcherServiceClient, func()) {
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "shout", Backend: shout}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "shout",
			Batch: bc}),
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
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	return batcherv1.NewBatcherServiceClient(conn), func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // drain first...
		gs.GracefulStop()     // ...then let the remaining RPCs end
	}
}

func chat(id, text string) *batcherv1.Request {
	return &batcherv1.Request{Id: id, Model: "chat", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{
		Messages: []*batcherv1.ChatMessage{{Role: "user", Content: text}},
	}}}
}

func ExampleServer_Submit() {
	client, stop := serve(batcher.BatchConfig{Window: 5 * time.Millisecond})
	defer stop()

	resp, err := client.Submit(context.Background(), &batcherv1.SubmitRequest{Request: chat("q1", "hello")})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := resp.GetCompletion()
	fmt.Println(c.GetId(), c.GetText(), c.GetFinishReason())

	_, err = client.Submit(context.Background(), &batcherv1.SubmitRequest{Request: &batcherv1.Request{Model: "gpt-unknown"}})
	fmt.Println(err)
	// Output:
	// q1 HELLO FINISH_REASON_STOP
	// rpc error: code = InvalidArgument desc = request.model: unknown model "gpt-unknown"
}

func ExampleServer_SubmitStream() {
	// Batches wait for a Flush (or ten requests), so that "a" is surely
	// still in flight when its duplicate arrives.
	client, stop := serve(batcher.BatchConfig{Window: time.Hour, MaxWait: time.Hour, MinBatchSize: 10})
	defer stop()

	stream, err := client.SubmitStream(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = stream.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Options{
		Options: &batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS},
	}})
	for _, r := range []*batcherv1.Request{chat("a", "one"), chat("b", "two"), chat("a", "dup")} {
		_ = stream.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: r}})
	}
	_ = stream.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Flush{Flush: &batcherv1.Flush{}}})
	_ = stream.CloseSend()

	texts := map[string]string{}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		switch {
		case m.GetCompletion() != nil:
			texts[m.GetCompletion().GetId()] = m.GetCompletion().GetText()
		case m.GetRejection() != nil:
			fmt.Println("rejected:", m.GetRejection().GetError().GetMessage())
		case m.GetSummary().GetFinal():
			s := m.GetSummary()
			fmt.Println("final: submitted", s.GetSubmitted(), "completed", s.GetCompleted(), "rejected", s.GetRejected())
		}
	}
	fmt.Println(texts["a"], texts["b"])
	// Output:
	// rejected: request.id: duplicate: "a" is already in flight on this stream
	// final: submitted 2 completed 2 rejected 1
	// ONE TWO
}
