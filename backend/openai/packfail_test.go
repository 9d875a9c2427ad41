package openai_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// packHater answers packed chat calls (those asking for a response_format)
// with 500 and single calls with 200.
func packHater(t *testing.T) (*httptest.Server, *atomic.Int64, *atomic.Int64) {
	var packs, singles atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ResponseFormat json.RawMessage `json:"response_format"`
			Messages       []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if len(req.ResponseFormat) > 0 {
			packs.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"the model crashed on a long prompt","type":"server_error"}}`)
			return
		}
		singles.Add(1)
		last := req.Messages[len(req.Messages)-1].Content
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "re: " + last}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": 3, "completion_tokens": 2},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &packs, &singles
}

// TestPackFailuresResentSingly: against an upstream that answers packed
// calls 500 and single calls 200, every one of 100 requests is answered:
// a failed pack is re-sent as single calls inside Dispatch, so the core's
// breaker sees only the singles' successes; after PauseAfter failed packs
// the route stops packing, and the log and Stats say so.
func TestPackFailuresResentSingly(t *testing.T) {
	srv, packs, _ := packHater(t)
	logs := &logBuffer{}
	be := newBackend(t, openai.Config{BaseURL: srv.URL, Logger: logs.logger(),
		Pack: openai.PackConfig{Enabled: true, PauseAfter: 3, PauseFor: time.Hour}})
	core := newCore(t, []batcher.BackendConfig{{Name: "up", Backend: be, MaxConcurrency: 2}}, []batcher.Route{{
		Name: "chat", Op: batcher.OpChat, Backend: "up", Model: "m", Batch: fullBatch(10),
	}})
	reqs := make([]*batcher.Request, 100)
	for i := range reqs {
		reqs[i] = chat("chat", fmt.Sprintf("question %d", i), "be brief")
	}
	answered := 0
	for i, res := range doAll(t, core, reqs) {
		if res.Err != nil {
			t.Errorf("request %d: %v", i, res.Err)
			continue
		}
		if want := fmt.Sprintf("re: question %d", i); res.Text != want {
			t.Errorf("request %d: %q, want %q", i, res.Text, want)
		}
		answered++
	}
	st := be.Stats()
	t.Logf("%d of 100 answered; upstream saw %d packs; stats %+v", answered, packs.Load(), st)
	if answered != 100 {
		t.Fatalf("%d of 100 answered", answered)
	}
	if st.PackFailed < 3 || st.PackPauses != 1 || st.PackPausedRoutes != 1 {
		t.Errorf("stats %+v: want at least 3 failed packs and the route paused once", st)
	}
	if packs.Load() > 5 { // 3 to pause, and at most MaxConcurrency more in flight then
		t.Errorf("%d packs sent: the route kept packing after its pause", packs.Load())
	}
	if !strings.Contains(logs.String(), `"msg":"openai: route stops packing: its packs keep failing, its requests go as single calls","route":"chat"`) {
		t.Errorf("no pause logged:\n%s", logs)
	}
	if !strings.Contains(logs.String(), `"kind":"server_error","class":"server_error","path":"/chat/completions","route":"chat"`) {
		t.Errorf("no upstream 500 logged:\n%s", logs)
	}
	if n := be.UpstreamCalls("chat", batcher.OpChat, 10); n != 10 {
		t.Errorf("UpstreamCalls while paused = %d, want 10 single calls", n)
	}
}
