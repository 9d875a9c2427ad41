package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/llmsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(withBuiltRemoved{m})
}

// withBuiltRemoved removes the shared batcherd binary after the tests.
type withBuiltRemoved struct{ m *testing.M }

func (w withBuiltRemoved) Run() int {
	defer func() {
		if built.dir != "" {
			_ = os.RemoveAll(built.dir)
		}
	}()
	return w.m.Run()
}

// testTimeout bounds each test's waits, so that a bug fails the test
// instead of hanging it.
const testTimeout = 90 * time.Second

func noEnv(string) (string, bool) { return "", false }

func TestRunBadConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--queue-capacity=0", "--log-level=loud"}, []string{"queue_capacity (--queue-capacity): must be at least 1, got 0", `log.level (--log-level): must be debug, info, warn or error, got "loud"`}},
		{[]string{"--config", "/nonexistent.yaml"}, []string{"config file: open /nonexistent.yaml"}},
		{[]string{"--listen=nowhere"}, []string{`listen (--listen): must be host:port, got "nowhere"`}},
	} {
		var stderr strings.Builder
		if code := run(t.Context(), func() {}, tc.args, noEnv, &stderr); code != exitConfig {
			t.Errorf("%v: exit %d, want %d", tc.args, code, exitConfig)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), w)
			}
		}
	}
	if code := run(t.Context(), func() {}, []string{"-h"}, noEnv, io.Discard); code != exitOK {
		t.Errorf("-h: exit %d, want 0", code)
	}
}

func TestRunListenFails(t *testing.T) {
	var stderr strings.Builder
	if code := run(t.Context(), func() {}, []string{"--listen=256.0.0.1:0", "--insecure"}, noEnv, &stderr); code != exitFailed {
		t.Errorf("exit %d, want %d; stderr %s", code, exitFailed, stderr.String())
	}
}

// logScanner reads batcherd's JSON log lines, keeps them for failure
// reports, and announces the listening address.
type logScanner struct {
	mu    sync.Mutex
	lines []string
	addr  chan string
}

func newLogScanner() *logScanner { return &logScanner{addr: make(chan string, 1)} }

func (l *logScanner) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
			select {
			case l.addr <- rec.Addr:
			default:
			}
		}
	}
}

func (l *logScanner) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logScanner) has(msg string) bool {
	return strings.Contains(l.String(), `"msg":"`+msg+`"`)
}

// pipeWriter gives run's stderr to a logScanner in-process.
func startInProcess(t *testing.T, args ...string) (addr string, cancel func(), exit <-chan int, logs *logScanner) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	logs = newLogScanner()
	scanned := make(chan struct{})
	go func() { logs.scan(pr); close(scanned) }()
	code := make(chan int, 1)
	go func() {
		c := run(ctx, func() {}, append([]string{"--log-format=json", "--admin-listen=127.0.0.1:0", "--http-listen=127.0.0.1:0"}, args...), noEnv, pw)
		_ = pw.Close()
		<-scanned
		code <- c
	}()
	t.Cleanup(stop)
	select {
	case addr = <-logs.addr:
	case c := <-code:
		t.Fatalf("batcherd exited %d before listening:\n%s", c, logs)
	case <-time.After(testTimeout):
		t.Fatalf("batcherd did not listen:\n%s", logs)
	}
	return addr, stop, code, logs
}

func TestRunServesAndStops(t *testing.T) {
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0")
	c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	comp, err := c.Submit(t.Context(), client.Embed("sim-embed", "hello"))
	if err != nil {
		t.Fatalf("Submit: %v\n%s", err, logs)
	}
	if n := len(comp.GetEmbedding().GetValues()); n != 32 {
		t.Errorf("embedding of %d dimensions, want the sim's default 32", n)
	}
	for _, want := range []string{`"msg":"route","name":"sim-chat"`, `"msg":"route","name":"sim-embed"`, `"msg":"backend","name":"sim","type":"sim"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the start log lacks %s:\n%s", want, logs)
		}
	}
	stop()
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d after the signal, want 0:\n%s", code, logs)
	}
	if !logs.has("shutting down") || !logs.has("stopped") {
		t.Errorf("no shutdown logged:\n%s", logs)
	}
}

const e2eConfig = `
stream_window: 64
drain_timeout: 30s
backends:
  - name: slow
    type: sim
    max_concurrency: 2
    sim: {base_latency: 150ms, per_token: 0s}
routes:
  - name: chat
    operation: chat
    backend: slow
    batching: {max_batch_size: 8, window: 20ms}
`

// TestEndToEndGracefulShutdown builds the real binary, streams a few hundred
// requests at it and sends SIGTERM mid-stream: every request the service
// accepted must get exactly one completion, every other one a clear status,
// and the process must exit 0.
func TestEndToEndGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBatcherd(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "batcherd.yaml")
	if err := os.WriteFile(cfgFile, []byte(e2eConfig), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "--config", cfgFile, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json")
	for _, kv := range os.Environ() { // keep the caller's BATCHER_* and OTEL_* out
		if !strings.HasPrefix(kv, "BATCHER_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := newLogScanner()
	exited := make(chan error, 1)
	go func() {
		logs.scan(stderr)
		exited <- cmd.Wait()
	}()
	var exitErr error
	waitExit := sync.OnceFunc(func() {
		select {
		case exitErr = <-exited:
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			exitErr = fmt.Errorf("killed: did not exit in time: %w", <-exited)
		}
	})
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op once it has exited
		waitExit()
	})

	var addr string
	select {
	case addr = <-logs.addr:
	case err := <-exited:
		exited <- err
		t.Fatalf("batcherd exited before listening: %v\n%s", err, logs)
	case <-ctx.Done():
		t.Fatalf("batcherd did not listen:\n%s", logs)
	}

	c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()

	var (
		mu       sync.Mutex
		accepted = map[string]bool{} // ids with a Queued event
	)
	s, err := c.Stream(ctx, client.OnEvent(func(ev *batcherv1.Event) {
		if ev.GetQueued() != nil {
			mu.Lock()
			accepted[ev.GetId()] = true
			mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}

	// Send n requests; the service reads 64 at a time (its window). Signal
	// once enough have completed.
	const n, beforeSignal = 300, 24
	var (
		handles  []*client.Handle
		finished atomic.Int32
		midway   = make(chan struct{})
		sendErr  error
	)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			h, err := s.Send(ctx, client.Chat("chat", client.User(fmt.Sprintf("request %d", i)),
				client.WithID(fmt.Sprintf("r%d", i)), client.WithMaxTokens(4)))
			if err != nil {
				sendErr = err
				return
			}
			mu.Lock()
			handles = append(handles, h)
			mu.Unlock()
			go func() {
				select {
				case <-h.Done():
					if finished.Add(1) == beforeSignal {
						close(midway)
					}
				case <-ctx.Done():
				}
			}()
		}
	}()
	// HTTP/2 buffers may hold every request, so the sender may be done: the
	// stream goes on while the service works through its window.
	select {
	case <-midway:
	case <-ctx.Done():
		t.Fatalf("%d requests did not complete:\n%s", beforeSignal, logs)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-sent

	mu.Lock()
	hs := handles
	mu.Unlock()
	if len(hs) == n {
		t.Logf("all %d requests sent before the stream ended", n)
	} else {
		t.Logf("%d requests sent; Send then failed: %v", len(hs), sendErr)
	}
	var ok, failed, refused int
	for _, h := range hs {
		comp, err := h.Wait(ctx)
		if ctx.Err() != nil {
			t.Fatalf("request %s never resolved\n%s", h.ID(), logs)
		}
		mu.Lock()
		acc := accepted[h.ID()]
		mu.Unlock()
		switch {
		case comp != nil && err == nil:
			ok++
			// The sim echoes the prompt: the answer is this request's own.
			if want := "request " + strings.TrimPrefix(h.ID(), "r"); !strings.HasPrefix(comp.GetText(), want) {
				t.Errorf("%s: text %q, want it to start %q", h.ID(), comp.GetText(), want)
			}
			if !acc {
				t.Errorf("%s completed with no Queued event", h.ID())
			}
		case comp != nil:
			failed++
			if st := status.Convert(err); st.Code() == codes.Unknown || st.Message() == "" {
				t.Errorf("%s: completion with an unclear error %v", h.ID(), err)
			}
		default:
			refused++
			if acc {
				t.Errorf("%s was accepted but got no completion: %v", h.ID(), err)
			}
			// A rejection, or the stream's end for a request never read:
			// either way UNAVAILABLE, the server shutting down.
			if code := status.Code(err); code != codes.Unavailable {
				t.Errorf("%s refused with %v (code %v), want UNAVAILABLE", h.ID(), err, code)
			}
		}
	}
	t.Logf("%d completed, %d failed, %d not accepted", ok, failed, refused)
	mu.Lock()
	nAccepted := len(accepted)
	mu.Unlock()
	if ok+failed != nAccepted {
		t.Errorf("%d completions for %d accepted requests", ok+failed, nAccepted)
	}
	// The drain timeout is ample: a graceful shutdown finishes every
	// accepted request rather than failing it.
	if failed > 0 || ok < beforeSignal {
		t.Errorf("%d accepted requests failed and %d succeeded: the drain should finish them all", failed, ok)
	}
	// Close waits for the stream's end, which follows its final summary.
	if err := s.Close(ctx); err != nil && status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v, want UNAVAILABLE (server shutting down)", err)
	}
	if sum := s.Summary(); sum == nil || !sum.GetFinal() || sum.GetCompleted()+sum.GetFailed() != int64(nAccepted) || sum.GetSubmitted() != int64(nAccepted) {
		t.Errorf("final summary %v, want final, with %d accepted and as many terminal", sum, nAccepted)
	}

	waitExit()
	if exitErr != nil {
		t.Fatalf("batcherd: %v\n%s", exitErr, logs)
	}
	for _, msg := range []string{"shutting down", "stopped"} {
		if !logs.has(msg) {
			t.Errorf("no %q logged:\n%s", msg, logs)
		}
	}
	if logs.has("drain incomplete") {
		t.Errorf("the drain did not complete:\n%s", logs)
	}
}

// TestRunOpenAIBackend runs batcherd in-process against an in-process
// llmsim through an openai backend: a chat, a completion and an embedding
// come back through the Go client with llmsim's answers, served by the
// openai backend.
func TestRunOpenAIBackend(t *testing.T) {
	sim, err := llmsim.New(llmsim.Config{ReplyTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	// Count the upstream's open connections: at exit batcherd closes its
	// backends, which drops their idle keep-alive connections.
	var (
		connMu  sync.Mutex
		conns   int
		changed = make(chan struct{}, 1)
	)
	upstream := httptest.NewUnstartedServer(sim)
	upstream.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		connMu.Lock()
		switch s {
		case http.StateNew:
			conns++
		case http.StateClosed, http.StateHijacked:
			conns--
		}
		connMu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	upstream.Start()
	t.Cleanup(func() {
		sim.Close()
		upstream.Close()
	})
	cfgFile := filepath.Join(t.TempDir(), "batcherd.yaml")
	cfg := fmt.Sprintf(`
backends:
  - name: llmsim
    type: openai
    openai:
      base_url: %s/v1
      pack: {enabled: true, routes: [chat]}
  - name: sim
    type: sim
routes:
  - {name: chat, operation: chat, backend: llmsim, model: sim-chat, fallbacks: [{backend: sim}], batching: {min_batch_size: 1}}
  - {name: completion, operation: completion, backend: llmsim, model: sim-completion, batching: {min_batch_size: 1}}
  - {name: embedding, operation: embedding, backend: llmsim, model: sim-embedding, batching: {min_batch_size: 1}}
`, upstream.URL)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, stop, exit, logs := startInProcess(t, "--config", cfgFile, "--listen=127.0.0.1:0")
	c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	const maxTokens = 8
	for _, tc := range []struct {
		req  *batcherv1.Request
		want string
	}{
		{client.Chat("chat", client.User("What is a batch?"), client.WithMaxTokens(maxTokens)), "What is a batch?"},
		{client.Complete("completion", "Once upon a time", client.WithMaxTokens(maxTokens)), "Once upon a time"},
	} {
		comp, err := c.Submit(ctx, tc.req)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.req.GetModel(), err, logs)
		}
		if want, _ := llmsim.Reply(tc.want, maxTokens, 12); comp.GetText() != want {
			t.Errorf("%s: text %q, want llmsim's %q", tc.req.GetModel(), comp.GetText(), want)
		}
		if comp.GetBackend() != "llmsim" {
			t.Errorf("%s: served by %q, want llmsim", tc.req.GetModel(), comp.GetBackend())
		}
		if comp.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_LENGTH || comp.GetUsage().GetCompletionTokens() != maxTokens {
			t.Errorf("%s: finish %v, usage %v: want cut at %d tokens", tc.req.GetModel(), comp.GetFinishReason(), comp.GetUsage(), maxTokens)
		}
	}
	comp, err := c.Submit(ctx, client.Embed("embedding", "hello"))
	if err != nil {
		t.Fatalf("embedding: %v\n%s", err, logs)
	}
	if got, want := comp.GetEmbedding().GetValues(), llmsim.Embedding("hello", llmsim.DefaultEmbeddingDim); !slices.Equal(got, want) {
		t.Errorf("embedding %v, want llmsim's %v", got, want)
	}
	if comp.GetBackend() != "llmsim" {
		t.Errorf("embedding: served by %q, want llmsim", comp.GetBackend())
	}
	if st := sim.Stats(); st.Chat != 1 || st.Completions != 1 || st.Embeddings != 1 {
		t.Errorf("llmsim saw %+v, want one call of each", st)
	}
	if want := `"msg":"backend","name":"llmsim","type":"openai"`; !strings.Contains(logs.String(), want) {
		t.Errorf("the start log lacks %s:\n%s", want, logs)
	}

	stop()
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d after the signal, want 0:\n%s", code, logs)
	}
	if logs.has("closing backends") {
		t.Errorf("closing the backends failed:\n%s", logs)
	}
	for {
		connMu.Lock()
		n := conns
		connMu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d upstream connections still open after exit: the openai backend was not closed", n)
		}
	}
}

// A mistyped BATCHER_* variable stops batcherd at start, naming it and the
// variable meant, instead of being ignored.
func TestRunEnvTypo(t *testing.T) {
	t.Setenv("BATCHER_LISTN", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // were it to start, it would stop at once
	var stderr strings.Builder
	if code := run(ctx, func() {}, []string{"--listen=127.0.0.1:0", "--admin-listen=off", "--http-listen=off"}, os.LookupEnv, &stderr); code != exitConfig {
		t.Errorf("exit %d, want %d; stderr %s", code, exitConfig, stderr.String())
	}
	if want := "BATCHER_LISTN: unknown environment variable: did you mean BATCHER_LISTEN?"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr.String(), want)
	}
}
