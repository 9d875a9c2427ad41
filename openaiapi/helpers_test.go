package openaiapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/openaiapi"
)

// testTimeout bounds each test's waits, so that a bug fails the test
// instead of hanging it.
const testTimeout = 30 * time.Second

const testToken = "sk-test-token"

// fakeBackend answers at once: chat "echo: <last message>", completion
// "done: <prompt>", embedding the text's bytes as floats. A text holding
// "fail:<class>" fails with that upstream class. hold makes Dispatch wait
// for Release (or its context).
type fakeBackend struct {
	hold        bool
	release     chan struct{}
	releaseOnce sync.Once
	started     chan *batcher.Batch // each Dispatch's batch, as it starts
	ctxDone     chan struct{}       // one send per held Dispatch whose context ended

	calls    atomic.Int64
	requests atomic.Int64

	mu    sync.Mutex
	spans []trace.SpanContext // each Dispatch's context span
	prios []batcher.Priority  // each request's priority
}

func newFake() *fakeBackend {
	return &fakeBackend{release: make(chan struct{}), started: make(chan *batcher.Batch, 4096), ctxDone: make(chan struct{}, 64)}
}

func (f *fakeBackend) Release() { f.releaseOnce.Do(func() { close(f.release) }) }

var failures = map[string]batcher.ErrorClass{
	"ratelimit": batcher.ClassRateLimit, "timeout": batcher.ClassTimeout, "network": batcher.ClassNetwork,
	"server": batcher.ClassServer, "auth": batcher.ClassAuth, "invalid": batcher.ClassInvalidRequest,
	"badresp": batcher.ClassInvalidResponse, "unknown": batcher.ClassUnknown,
}

func (f *fakeBackend) Dispatch(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	f.calls.Add(1)
	f.requests.Add(int64(len(b.Requests)))
	f.mu.Lock()
	f.spans = append(f.spans, trace.SpanContextFromContext(ctx))
	for _, r := range b.Requests {
		f.prios = append(f.prios, r.Priority)
	}
	f.mu.Unlock()
	select {
	case f.started <- b:
	default:
	}
	if f.hold {
		select {
		case <-f.release:
		case <-ctx.Done():
			select {
			case f.ctxDone <- struct{}{}:
			default:
			}
			return ctx.Err()
		}
	}
	for i, r := range b.Requests {
		var text string
		switch r.Input.Op {
		case batcher.OpChat:
			text = r.Input.Messages[len(r.Input.Messages)-1].Content
			out[i].Text = "echo: " + text
		case batcher.OpCompletion:
			text = r.Input.Prompt
			out[i].Text = "done: " + text
		case batcher.OpEmbedding:
			text = r.Input.Text
			out[i].Embedding = embedOf(text)
		}
		if _, class, ok := strings.Cut(text, "fail:"); ok {
			ue := &batcher.UpstreamError{Class: failures[class], StatusCode: 500, Message: "injected " + class}
			if class == "ratelimit" {
				ue.RateLimit = &batcher.RateLimitInfo{RetryAfter: 3 * time.Second}
			}
			out[i] = batcher.Response{Err: ue}
			continue
		}
		out[i].FinishReason = batcher.FinishStop
		out[i].Usage = batcher.Usage{PromptTokens: int32(len(text)), CompletionTokens: 2}
	}
	return nil
}

// embedOf is the fake's embedding of text: its bytes as floats.
func embedOf(text string) []float32 {
	v := make([]float32, len(text))
	for i := range len(text) {
		v[i] = float32(text[i])
	}
	return v
}

// env is a core with three routes on a fake backend, the handler in front
// of it on a loopback port, and an SDK client.
type env struct {
	fake    *fakeBackend
	core    *batcher.Batcher
	handler *openaiapi.Handler
	srv     *httptest.Server
	client  openai.Client
	url     string // base URL, ".../v1"
	dir     string // the file store's directory, "" without one
}

type envConfig struct {
	batch    batcher.BatchConfig
	coreOpts []batcher.Option
	opts     []openaiapi.Option
	noFiles  bool
}

type envOption func(*envConfig)

func withBatch(b batcher.BatchConfig) envOption { return func(c *envConfig) { c.batch = b } }
func withCore(o ...batcher.Option) envOption {
	return func(c *envConfig) { c.coreOpts = append(c.coreOpts, o...) }
}
func withHandler(o ...openaiapi.Option) envOption {
	return func(c *envConfig) { c.opts = append(c.opts, o...) }
}

func newEnv(t testing.TB, fake *fakeBackend, opts ...envOption) *env {
	t.Helper()
	cfg := envConfig{batch: batcher.BatchConfig{Window: 2 * time.Millisecond, MaxWait: 50 * time.Millisecond}}
	for _, o := range opts {
		o(&cfg)
	}
	core, err := batcher.New(append([]batcher.Option{
		batcher.WithBackend(batcher.BackendConfig{Name: "fake", Backend: fake,
			Retry: batcher.RetryPolicy{MaxRetries: -1}, Breaker: batcher.BreakerConfig{Consecutive: -1, Ratio: 1, MinCalls: 1 << 20}}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "fake", Batch: cfg.batch}),
		batcher.WithRoute(batcher.Route{Name: "comp", Op: batcher.OpCompletion, Backend: "fake", Batch: cfg.batch}),
		batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "fake", Batch: cfg.batch}),
	}, cfg.coreOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hopts := []openaiapi.Option{openaiapi.WithTokens(testToken), openaiapi.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	dir := ""
	if !cfg.noFiles {
		dir = t.TempDir()
		fs, err := openaiapi.OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		hopts = append(hopts, openaiapi.WithFileStore(fs))
	}
	h, err := openaiapi.New(core, append(hopts, cfg.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	e := &env{fake: fake, core: core, handler: h, srv: srv, url: srv.URL + "/v1", dir: dir}
	e.client = openai.NewClient(option.WithBaseURL(e.url+"/"), option.WithAPIKey(testToken), option.WithMaxRetries(0))
	t.Cleanup(func() {
		fake.Release()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := core.Shutdown(ctx); err != nil {
			t.Errorf("core shutdown: %v", err)
		}
		srv.Close()
	})
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// apiError returns err as the SDK's *openai.Error, failing the test when it
// is not one.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T): want an *openai.Error", err, err)
	}
	return ae
}

// post sends a raw JSON body and returns the status, headers and body.
func (e *env) post(t *testing.T, path, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	return send(t, http.MethodPost, e.url+path, body, header...)
}
