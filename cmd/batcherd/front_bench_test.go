package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/openaiapi"
	"github.com/batcherhq/batcher/server"
)

// benchCallers is the load: this many callers at once (RunParallel's
// goroutines are the parallelism times GOMAXPROCS).
const benchCallers = 50

// BenchmarkFrontChat compares chat completions through the OpenAI front
// door with gRPC Submit: one core with an instant backend behind both, each
// served as batcherd serves it on loopback TCP, the same 50 callers' load,
// the sub-benchmarks interleaved in one run (-count). http-sdk calls with
// the official OpenAI Go SDK; http-raw with net/http and encoding/json, to
// tell the SDK's own cost from the server's.
func BenchmarkFrontChat(b *testing.B) {
	instant := batcher.BackendFunc(func(_ context.Context, bt *batcher.Batch, out []batcher.Response) error {
		for i := range bt.Requests {
			out[i] = batcher.Response{Text: "hi there", FinishReason: batcher.FinishStop, Usage: batcher.Usage{PromptTokens: 2, CompletionTokens: 2}}
		}
		return nil
	})
	core, err := batcher.New(
		batcher.WithQueueCapacity(100000),
		batcher.WithBackend(batcher.BackendConfig{Name: "instant", Backend: instant, MaxConcurrency: 64}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "instant",
			Batch: batcher.BatchConfig{Window: 200 * time.Microsecond, MaxBatchSize: 32}}),
	)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(core)
	if err != nil {
		b.Fatal(err)
	}
	gs := server.NewGRPCServer(nil)
	srv.Register(gs)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(glis) }()
	h, err := openaiapi.New(core)
	if err != nil {
		b.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout}
	go func() { _ = hs.Serve(hlis) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = hs.Shutdown(ctx)
		gs.Stop()
	})

	gc, err := client.Dial(glis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gc.Close() })
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * benchCallers}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	url := "http://" + hlis.Addr().String() + "/v1"
	sdk := openai.NewClient(option.WithBaseURL(url+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
	ctx := b.Context()
	parallel := func(b *testing.B, call func() error) {
		b.ReportAllocs()
		b.SetParallelism(max(1, benchCallers/max(1, testingProcs())))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}

	b.Run("grpc", func(b *testing.B) {
		req := client.Chat("chat", client.User("hello"), client.WithMaxTokens(16))
		parallel(b, func() error {
			_, err := gc.Submit(ctx, req)
			return err
		})
	})
	b.Run("http-sdk", func(b *testing.B) {
		params := openai.ChatCompletionNewParams{Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			MaxTokens: openai.Int(16)}
		parallel(b, func() error {
			_, err := sdk.Chat.Completions.New(ctx, params)
			return err
		})
	})
	b.Run("http-raw", func(b *testing.B) {
		body := []byte(`{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`)
		parallel(b, func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			data, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			var out struct {
				Choices []struct {
					Message struct{ Content string }
				}
			}
			if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) != 1 || !strings.HasPrefix(out.Choices[0].Message.Content, "hi") {
				return &json.SyntaxError{}
			}
			return nil
		})
	})
	// The SDK against a server that answers a fixed body at once: what the
	// SDK's client side costs on these cores, with no Batcher behind it.
	b.Run("http-sdk-static", func(b *testing.B) {
		const answer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"chat","choices":[{"index":0,"message":{"role":"assistant","content":"hi there","refusal":null},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}`
		static := &http.Server{ReadHeaderTimeout: httpReadHeaderTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, answer)
		})}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = static.Serve(lis) }()
		defer func() { _ = static.Close() }()
		c := openai.NewClient(option.WithBaseURL("http://"+lis.Addr().String()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0), option.WithHTTPClient(hc))
		params := openai.ChatCompletionNewParams{Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			MaxTokens: openai.Int(16)}
		parallel(b, func() error {
			_, err := c.Chat.Completions.New(ctx, params)
			return err
		})
	})
	// The translation layers alone, in process, with no client, network or
	// framing: the HTTP handler (which still decodes and encodes its JSON)
	// against the gRPC service's method (handed a decoded message).
	b.Run("inproc-grpc", func(b *testing.B) {
		req := &batcherv1.SubmitRequest{Request: client.Chat("chat", client.User("hello"), client.WithMaxTokens(16))}
		parallel(b, func() error {
			_, err := srv.Submit(ctx, req)
			return err
		})
	})
	b.Run("inproc-http", func(b *testing.B) {
		body := `{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":16}`
		parallel(b, func() error {
			r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				return err
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				return errors.New(w.Body.String())
			}
			return nil
		})
	})
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
