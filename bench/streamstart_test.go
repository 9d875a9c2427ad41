package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/upstream"
	"github.com/batcherhq/batcher/llmsim"
	"github.com/batcherhq/batcher/server"
	"google.golang.org/protobuf/proto"
)

// BenchmarkStreamStart is the CPU of one streamed chat whose answer is one
// token, one chat at a time, straight to llmsim (path=direct) and through
// batcherd's stack (path=batcherd: the rig of BenchmarkStreamTTFT, with an
// llmsim that answers at once). With one token an answer is mostly its
// start: the gRPC stream's set-up on both sides, the server's translation,
// the core's admission and dispatch, the backend's request and the HTTP
// round trip, and the first delta's way back. The difference of the two
// paths' cpu-us/chat is what issue 28's time to first token pays for in a
// burst (BenchmarkStreamTTFT's cpu-added-ms/chat, less its per-delta
// part). Run it with -cpuprofile and -memprofile to see where it goes.
func BenchmarkStreamStart(b *testing.B) {
	for _, through := range []bool{false, true} {
		name := "path=direct"
		if through {
			name = "path=batcherd"
		}
		b.Run(name, func(b *testing.B) { benchStreamStart(b, through) })
	}
}

func benchStreamStart(b *testing.B, through bool) {
	sim, err := llmsim.New(llmsim.Config{ReplyTokens: 1})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	defer func() { sim.Close(); ts.Close() }()
	url := ts.URL + "/v1"
	var chat func(ctx context.Context, i int) error
	if through {
		tg := serveStreamCore(b, url)
		defer tg.stop()
		chat = func(ctx context.Context, i int) error { return startThrough(ctx, tg.client, i) }
	} else {
		// The backend's transport and read buffer, as the rig's direct
		// client has (newStreamRig, streamRig.direct): the difference of
		// the two paths is then what lies between.
		hc := &http.Client{Transport: upstream.NewTransport(openai.DefaultMaxIdleConns, nil)}
		defer hc.CloseIdleConnections()
		chat = func(ctx context.Context, i int) error { return startDirect(ctx, hc, url, i) }
	}
	ctx := context.Background()
	for i := range 20 { // connections, lazily built state
		if err := chat(ctx, -1-i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	c0 := processCPU(b)
	i := 0
	for b.Loop() {
		if err := chat(ctx, i); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64((processCPU(b)-c0).Microseconds())/float64(i), "cpu-us/chat")
}

// serveStreamCore serves batcherd's stack (setupBatcherd) with a core
// whose one chat route goes to the openai backend at url, built as
// batcherd builds it, and dials it as Batcher's Go client dials
// (client.DialOptions), as the rig of BenchmarkStreamTTFT does
// (loadClient.dial): with grpc-go's default dial, the client's BDP
// estimator pinged the server for each chat, 3 of a chat's 12 writes.
func serveStreamCore(tb testing.TB, url string) *target {
	tb.Helper()
	bd := setupBatcherd.build(tb)
	var be *openai.Backend
	var err error
	bd.asBatcherd(func() { be, err = openai.New(openai.Config{BaseURL: url}) })
	if err != nil {
		tb.Fatal(err)
	}
	core, err := batcher.New(append(bd.core,
		batcher.WithBackend(batcher.BackendConfig{Name: "llmsim", Backend: be, MaxConcurrency: 100, ProtectedShare: -1}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "llmsim", Model: "sim-chat"}),
	)...)
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := server.New(core, bd.server...)
	if err != nil {
		tb.Fatal(err)
	}
	return serve(tb, bd.gs, srv.Register, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
		bd.cleanup()
		_ = be.Close()
	}, client.DialOptions()...)
}

// startThrough streams chat i through batcherd to its end.
func startThrough(ctx context.Context, client batcherv1.BatcherServiceClient, i int) error {
	ss, err := client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: &batcherv1.Request{
		Model: "chat", Params: &batcherv1.GenerationParams{MaxTokens: proto.Int32(16)},
		Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{{Role: "user", Content: fmt.Sprint("start chat ", i)}}}},
	}})
	if err != nil {
		return err
	}
	deltas := 0
	for {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			if deltas == 0 {
				return fmt.Errorf("chat %d: no delta", i)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if m.GetDelta().GetText() != "" {
			deltas++
		}
		if e := m.GetCompletion().GetError(); e != nil {
			return fmt.Errorf("chat %d: %v", i, e)
		}
	}
}

// startDirect streams chat i straight from llmsim to its end.
func startDirect(ctx context.Context, hc *http.Client, url string, i int) error {
	body := fmt.Appendf(nil, `{"model":"sim-chat","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"start chat %d"}]}`, i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReaderSize(resp.Body, 1024)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("chat %d: stream ended before [DONE]: %w", i, err)
		}
		if bytes.Equal(bytes.TrimSpace(line), []byte("data: [DONE]")) {
			_, _ = io.Copy(io.Discard, br)
			return nil
		}
	}
}
