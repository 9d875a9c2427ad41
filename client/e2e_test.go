package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serveReal serves the real service (server over the core, with backend be
// behind the route "sim-chat") and returns a Client of it; everything stops when the test ends.
func serveReal(t *testing.T, be batcher.Backend, bc batcher.BatchConfig, opts ...server.Option) *client.Client {
	t.Helper()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "shout", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: "sim-chat", Op: batcher.OpChat, Backend: "shout", Batch: bc}),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(core, append([]server.Option{server.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	return client.New(serve(t, srv))
}

// Many senders over one stream whose server window is tiny: the server
// stops reading often, Sends block in flow control and resume, and every
// request still resolves with its own answer.
func TestRealServerStreamConcurrentSafe(t *testing.T) {
	c := serveReal(t, shout, batcher.BatchConfig{MaxBatchSize: 4, MinBatchSize: 1, Window: time.Millisecond}, server.WithStreamWindow(2))
	var mu sync.Mutex
	events := 0
	s, err := c.Stream(t.Context(), client.OnEvent(func(*batcherv1.Event) { mu.Lock(); events++; mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	const senders, each = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for g := range senders {
		wg.Go(func() {
			var hs []*client.Handle
			for i := range each {
				h, err := s.Send(t.Context(), client.Chat("sim-chat", client.User(fmt.Sprintf("m%d-%d", g, i))))
				if err != nil {
					errs <- err
					return
				}
				hs = append(hs, h)
			}
			for i, h := range hs {
				comp, err := h.Wait(t.Context())
				if want := strings.ToUpper(fmt.Sprintf("m%d-%d", g, i)); err != nil || comp.GetText() != want {
					errs <- fmt.Errorf("%s: %v, %w; want %s", h.ID(), comp, err, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mustClose(t, s)
	if sum := s.Summary(); !sum.GetFinal() || sum.GetCompleted() != senders*each {
		t.Errorf("final summary %v, want %d completed", sum, senders*each)
	}
	mu.Lock()
	defer mu.Unlock()
	if events < 3*senders*each { // queued, batched, dispatched each
		t.Errorf("%d events, want at least %d", events, 3*senders*each)
	}
}

// Close drains: with every request held in the backend, Close returns only
// once the service has answered them all and ended the stream with OK.
func TestRealServerCloseDrains(t *testing.T) {
	release := make(chan struct{})
	held := batcher.BackendFunc(func(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return shout(ctx, b, out)
	})
	c := serveReal(t, held, batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1})
	s, err := c.Stream(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var hs []*client.Handle
	for i := range 4 {
		hs = append(hs, mustSend(t, s, client.Chat("sim-chat", client.User(fmt.Sprint("x", i)))))
	}
	bad := mustSend(t, s, client.Chat("nope", client.User("x")))
	if _, err := wait(t, bad); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown model: %v, want INVALID_ARGUMENT", err)
	}
	for i, h := range hs {
		if resolved(h) {
			t.Fatalf("handle %d resolved while the backend holds it", i)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(t.Context()) }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, h := range hs {
		if !resolved(h) {
			t.Fatalf("handle %d unresolved after Close", i)
		}
		if comp, err := wait(t, h); err != nil || comp.GetText() != fmt.Sprint("X", i) {
			t.Errorf("handle %d = %v, %v", i, comp, err)
		}
	}
}
