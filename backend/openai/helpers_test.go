package openai_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

func TestMain(m *testing.M) {
	// Backends log upstream failures to the default logger unless a test
	// gives them one; keep test output to the tests' own words.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	goleak.VerifyTestMain(m)
}

// startSim serves an llmsim with cfg on a loopback port until the test
// ends.
func startSim(t testing.TB, cfg llmsim.Config) (*llmsim.Server, string) {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.Close()
		ts.Close()
	})
	return sim, ts.URL + "/v1"
}

// newBackend returns an openai backend for cfg, closed when the test ends.
func newBackend(t testing.TB, cfg openai.Config) *openai.Backend {
	t.Helper()
	be, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	return be
}

// newCore returns a Batcher over the given backends and routes, shut down
// when the test ends.
func newCore(t testing.TB, backends []batcher.BackendConfig, routes []batcher.Route, opts ...batcher.Option) *batcher.Batcher {
	t.Helper()
	for _, b := range backends {
		opts = append(opts, batcher.WithBackend(b))
	}
	for _, r := range routes {
		opts = append(opts, batcher.WithRoute(r))
	}
	core, err := batcher.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := core.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return core
}

// chat returns a chat request for route with one user message.
func chat(route, user string, system ...string) *batcher.Request {
	var msgs []batcher.Message
	for _, s := range system {
		msgs = append(msgs, batcher.Message{Role: "system", Content: s})
	}
	msgs = append(msgs, batcher.Message{Role: "user", Content: user})
	return &batcher.Request{Route: route, Priority: batcher.PriorityNormal, Input: batcher.Input{Op: batcher.OpChat, Messages: msgs}}
}

func embedding(route, text string) *batcher.Request {
	return &batcher.Request{Route: route, Priority: batcher.PriorityNormal, Input: batcher.Input{Op: batcher.OpEmbedding, Text: text}}
}

func completion(route, prompt string) *batcher.Request {
	return &batcher.Request{Route: route, Priority: batcher.PriorityNormal, Input: batcher.Input{Op: batcher.OpCompletion, Prompt: prompt}}
}

// doAll runs every request through core at once and returns their results
// in order.
func doAll(t testing.TB, core *batcher.Batcher, reqs []*batcher.Request) []batcher.Result {
	t.Helper()
	out := make([]batcher.Result, len(reqs))
	done := make(chan struct{})
	for i, r := range reqs {
		go func() {
			out[i], _ = core.Do(context.Background(), r)
			done <- struct{}{}
		}()
	}
	for range reqs {
		<-done
	}
	return out
}

// dispatch calls be directly with a batch of reqs.
func dispatch(ctx context.Context, be batcher.Backend, route, model string, maxTokens int32, reqs ...*batcher.Request) ([]batcher.Response, *batcher.Batch, error) {
	b := &batcher.Batch{ID: "b1", Route: route, Model: model, Op: reqs[0].Input.Op, Requests: reqs, MaxTokens: maxTokens}
	out := make([]batcher.Response, len(reqs))
	err := be.Dispatch(ctx, b, out)
	return out, b, err
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
