package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// httpAddr returns the front door's address from batcherd's log, which
// logs it before the gRPC "listening" line that startInProcess waits for.
func httpAddr(t *testing.T, logs *logScanner) string {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "http listening" {
			return rec.Addr
		}
	}
	t.Fatalf("no \"http listening\" line:\n%s", logs)
	return ""
}

func sdkClient(addr, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// TestRunHTTP: batcherd serves the OpenAI API next to gRPC, on the
// embedded simulator's routes, with files under <data-dir>/files.
func TestRunHTTP(t *testing.T) {
	dataDir := t.TempDir()
	_, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--data-dir", dataDir)
	c := sdkClient(httpAddr(t, logs), "")
	ctx := t.Context()

	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "sim-chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
	if err != nil || chat.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %+v, %v\n%s", chat, err, logs)
	}
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "sim-embed", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b", "c"}},
	})
	if err != nil || len(emb.Data) != 3 || len(emb.Data[2].Embedding) == 0 {
		t.Fatalf("embeddings: %v", err)
	}
	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) != 3 {
		t.Fatalf("models: %+v, %v", models, err)
	}
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File: openai.File(strings.NewReader("{\"custom_id\":\"1\"}\n"), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "files", f.ID)); err != nil {
		t.Errorf("the upload is not under <data-dir>/files: %v", err)
	}

	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, logs)
	}
}

// TestRunHTTPShutdown: once a signal has closed admission, the front door
// answers 503 while the core drains what it holds.
//
// The held request takes 3 s: the drain, and so the listener, lasts that
// long from its dispatch, and the test must see a 503 within it. With
// 500 ms, a loaded machine slow from the signal to the first answered GET
// would find the listener already closed.
func TestRunHTTPShutdown(t *testing.T) {
	cfg := writeConfig(t, `
backends:
  - {name: slow, type: sim, sim: {base_latency: 3s}}
routes:
  - {name: slow-chat, operation: chat, backend: slow}
`)
	grpcAddr, stop, exit, logs := startInProcess(t, "--config", cfg, "--listen=127.0.0.1:0")
	addr := httpAddr(t, logs)

	// Hold the core in its drain with a request it has admitted.
	gc, err := client.Dial(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gc.Close() }()
	events := make(chan *batcherv1.Event, 16)
	s, err := gc.Stream(t.Context(), client.WithEvents(events))
	if err != nil {
		t.Fatal(err)
	}
	held, err := s.Send(t.Context(), client.Chat("slow-chat", client.User("hold on"), client.WithID("held")))
	if err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.GetQueued() != nil {
			break
		}
	}

	stop()
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := http.Get("http://" + addr + "/v1/models")
		if err != nil {
			t.Fatalf("the listener closed before answering 503: %v\n%s", err, logs)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			if !strings.Contains(string(body), `"code":"shutting_down"`) {
				t.Errorf("503 body %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 503 after the signal:\n%s", logs)
		}
	}
	if _, err := held.Wait(t.Context()); err != nil {
		t.Errorf("the request held at shutdown: %v", err)
	}
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, logs)
	}
}

// TestRunHTTPRefusesNetworkWithoutTokens: the front door follows the rule
// of every listener: off loopback it needs TLS and authentication, or
// --insecure, which then serves it as it is (docs/security.md, "Every listener").
func TestRunHTTPRefusesNetworkWithoutTokens(t *testing.T) {
	var stderr strings.Builder
	code := run(t.Context(), func() {}, []string{"--listen=127.0.0.1:0", "--http-listen=0.0.0.0:0"}, noEnv, &stderr)
	if code != exitConfig || !strings.Contains(stderr.String(), `http.listen: 0.0.0.0:0 is not a loopback address`) ||
		!strings.Contains(stderr.String(), "--insecure") {
		t.Errorf("exit %d, stderr %s", code, stderr.String())
	}
	_, cancel, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--http-listen=0.0.0.0:0", "--insecure")
	if !logs.has("http listening") {
		t.Errorf("--http-listen 0.0.0.0:0 --insecure did not serve:\n%s", logs)
	}
	cancel()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, logs)
	}
}

// TestRunHTTPTokens: with a tokens file, the front door may serve the
// network and asks every caller for a token; the token never reaches the
// log.
func TestRunHTTPTokens(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	const token = "sk-batcher-secret-1"
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "http: {tokens_file: "+tokens+"}\n")
	_, stop, exit, logs := startInProcess(t, "--config", cfg, "--listen=127.0.0.1:0", "--http-listen=0.0.0.0:0", "--insecure")
	addr := strings.Replace(httpAddr(t, logs), "[::]", "127.0.0.1", 1)
	wrong, right := sdkClient(addr, "wrong"), sdkClient(addr, token)
	if _, err := wrong.Models.List(t.Context()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v, want 401", err)
	}
	if _, err := right.Models.List(t.Context()); err != nil {
		t.Errorf("right token: %v", err)
	}
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, logs)
	}
	if strings.Contains(logs.String(), token) {
		t.Error("the token appears in the log")
	}
}
