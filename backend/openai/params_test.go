package openai_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

// A chat route that does not pack shares no parameter across a batch, so
// the core may batch requests with different parameters; each upstream
// call then carries its own request's. Packing routes, completions and
// embeddings send one call for many requests and share them all.
func TestFanOutCallsCarryEachRequestsParams(t *testing.T) {
	var mu sync.Mutex
	bodies := map[string]map[string]any{} // by the user message
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if err := jsonDecode(r.Body, &m); err != nil {
			t.Error(err)
		}
		msgs, _ := m["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		content, _ := last["content"].(string)
		mu.Lock()
		bodies[content] = m
		mu.Unlock()
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"content":"x"}}]}`)
	}))
	defer srv.Close()
	be := newBackend(t, openai.Config{BaseURL: srv.URL, Pack: openai.PackConfig{Enabled: true, Routes: []string{"packed"}}})

	for _, tt := range []struct {
		route string
		op    batcher.Operation
		want  batcher.ParamSet
	}{
		{"chat", batcher.OpChat, 0},
		{"packed", batcher.OpChat, batcher.AllParams &^ batcher.ParamRich},
		{"complete", batcher.OpCompletion, batcher.AllParams},
		{"embed", batcher.OpEmbedding, batcher.AllParams},
	} {
		if got := be.SharedParams(tt.route, "m", tt.op); got != tt.want {
			t.Errorf("SharedParams(%q, %v) = %b, want %b", tt.route, tt.op, got, tt.want)
		}
	}

	t1, t2, seed := float32(0.2), float32(0.9), int64(7)
	a, b := chat("chat", "first"), chat("chat", "second")
	a.ID, b.ID = "a", "b"
	a.Params = batcher.Params{MaxTokens: 11, Temperature: &t1, Seed: &seed, Stop: []string{"A"}}
	b.Params = batcher.Params{Temperature: &t2}
	out, _, err := dispatch(context.Background(), be, "chat", "gpt-x", 99, a, b)
	if err != nil || out[0].Err != nil || out[1].Err != nil {
		t.Fatalf("dispatch: %v, %v, %v", err, out[0].Err, out[1].Err)
	}
	mu.Lock()
	defer mu.Unlock()
	ma, mb := bodies["first"], bodies["second"]
	if ma["max_tokens"] != 11.0 || ma["temperature"] != 0.2 || ma["seed"] != 7.0 {
		t.Errorf("first call %v, want max_tokens 11, temperature %v, seed 7", ma, t1)
	}
	if stop, _ := ma["stop"].([]any); len(stop) != 1 || stop[0] != "A" {
		t.Errorf("first call stop %v, want [A]", ma["stop"])
	}
	if mb["max_tokens"] != 99.0 || mb["temperature"] != 0.9 || mb["seed"] != nil || mb["stop"] != nil {
		t.Errorf("second call %v, want the batch's max_tokens 99, temperature %v, no seed or stop", mb, t2)
	}
}
