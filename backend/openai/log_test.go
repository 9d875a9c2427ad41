package openai_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

type traceKey struct{}

// record is one captured log record with the context it was logged with.
type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
	trace any // the context's traceKey value: was the request's ctx used?
}

// recorder is a slog.Handler that keeps records.
type recorder struct {
	mu   sync.Mutex
	recs []record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	m := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, record{level: rec.Level, msg: rec.Message, attrs: m, trace: ctx.Value(traceKey{})})
	r.mu.Unlock()
	return nil
}

func (r *recorder) all() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), r.recs...)
}

// TestUpstreamFailuresLogged: 404, 429, 5xx, timeouts and refused
// connections each log one structured record, with the request's context
// (where a trace handler finds trace_id and span_id), naming the kind, the
// status and the endpoint's path and never the key; repeats within
// LogInterval are held back.
func TestUpstreamFailuresLogged(t *testing.T) {
	t.Setenv("OPENAI_TEST_KEY", testKey)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // else the server does not see the caller leave
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + lis.Addr().String() + "/v1"
	_ = lis.Close()

	tests := []struct {
		name   string
		url    string
		kind   string
		level  slog.Level
		status string
		msg    string // in the record's message attribute
	}{
		{"404", answerT(t, 404, `{"error":"Not Found","message":"model m does not exist"}`).URL + "/v1", "not_found", slog.LevelError, "404",
			"HTTP 404 Not Found from /v1/chat/completions: model m does not exist"},
		{"429", answerT(t, 429, `{"error":{"message":"Rate limit reached"}}`, "Retry-After", "2").URL + "/v1", "rate_limited", slog.LevelWarn, "429",
			"HTTP 429 Too Many Requests from /v1/chat/completions: Rate limit reached; retry after 2s"},
		{"500", answerT(t, 500, `{"error":{"message":"boom for %KEY%"}}`).URL + "/v1", "server_error", slog.LevelWarn, "500",
			"HTTP 500 Internal Server Error from /v1/chat/completions: boom for Bearer [redacted]"},
		{"timeout", hang.URL + "/v1", "timeout", slog.LevelWarn, "", "no answer in time (/v1/chat/completions)"},
		{"refused", refused, "refused", slog.LevelWarn, "", "connection refused (/v1/chat/completions)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			be := newBackend(t, openai.Config{BaseURL: tt.url, APIKeyEnv: "OPENAI_TEST_KEY", Timeout: 100 * time.Millisecond,
				Logger: slog.New(rec), LogInterval: time.Hour})
			ctx := context.WithValue(context.Background(), traceKey{}, "trace-1")
			for range 3 {
				if _, _, err := dispatch(ctx, be, "chat", "m", 8, chat("chat", "x")); err == nil {
					t.Fatal("dispatch succeeded")
				}
			}
			recs := rec.all()
			if len(recs) != 1 {
				t.Fatalf("%d records for 3 failures within the interval, want 1: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.msg != "openai: upstream call failed" || r.level != tt.level || r.attrs["kind"] != tt.kind ||
				r.attrs["path"] != "/v1/chat/completions" || r.attrs["status"] != tt.status || r.attrs["route"] != "chat" {
				t.Errorf("record %+v", r)
			}
			if r.attrs["message"] != tt.msg {
				t.Errorf("message %q, want %q", r.attrs["message"], tt.msg)
			}
			if tt.name == "refused" && r.attrs["cause"] != "Post /v1/chat/completions: dial tcp "+strings.TrimPrefix(strings.TrimSuffix(refused, "/v1"), "http://")+": connect: connection refused" {
				t.Errorf("cause %q: want the path, not the URL", r.attrs["cause"])
			}
			if r.trace != "trace-1" {
				t.Errorf("logged without the request's context")
			}
			for k, v := range r.attrs {
				if strings.Contains(v, "SECRET") || strings.Contains(v, "0123456789") {
					t.Errorf("%s leaks the key: %q", k, v)
				}
			}
		})
	}
}

// TestErrorMessages: an upstream's error and message both survive, the
// status text is not repeated, and a native batch's missing answer names
// the request by its id.
func TestErrorMessages(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{`{"error":"Not Found"}`, "HTTP 404 Not Found from /chat/completions"},
		{`{"error":"Bad model","message":"model m does not exist"}`, "HTTP 404 Not Found from /chat/completions: Bad model: model m does not exist"},
		{`{"error":{"message":"no such model"},"message":"see the docs"}`, "HTTP 404 Not Found from /chat/completions: no such model: see the docs"},
	} {
		be := newBackend(t, openai.Config{BaseURL: answerT(t, 404, tt.body).URL})
		_, _, err := dispatch(context.Background(), be, "r", "m", 8, chat("r", "x"))
		if ue := upstreamErr(t, err); ue.Message != tt.want || ue.Class != batcher.ClassNotFound {
			t.Errorf("%s: %v %q, want not_found %q", tt.body, ue.Class, ue.Message, tt.want)
		}
	}
	be := newBackend(t, openai.Config{BaseURL: answerT(t, 200, `{"data":[{"index":0,"embedding":[1]}]}`).URL})
	a, b := embedding("r", "x"), embedding("r", "y")
	a.ID, b.ID = "req-a", "req-b"
	out, _, _ := dispatch(context.Background(), be, "r", "m", 0, a, b)
	if ue := upstreamErr(t, out[1].Err); ue.Message != `no embedding for request "req-b" (HTTP 200 from /embeddings)` {
		t.Errorf("missing answer: %q", ue.Message)
	}
}

// TestMalformedChatAnswers: a 200 whose body does not make an answer is an
// invalid response, for single and packed chat alike.
func TestMalformedChatAnswers(t *testing.T) {
	for _, body := range []string{`null`, `[]`, `{}`, `{"choices":[]}`, `{"choices":[{"message":{}}]}`,
		`{"choices":[{"message":{"content":null}}]}`, `{"choices":"x"}`, `{"choices":[{"message":`} {
		for _, packed := range []bool{false, true} {
			be := newBackend(t, openai.Config{BaseURL: answerT(t, 200, body).URL, Pack: openai.PackConfig{Enabled: packed}})
			out, _, err := dispatch(context.Background(), be, "r", "m", 8, chat("r", "x"), chat("r", "y"))
			if ue := upstreamErr(t, err); ue.Class != batcher.ClassInvalidResponse {
				t.Errorf("%s (packed %v): %v, want invalid_response", body, packed, ue)
			}
			for i := range out {
				if batcher.ClassOf(out[i].Err) != batcher.ClassInvalidResponse {
					t.Errorf("%s (packed %v): response %d: %v", body, packed, i, out[i].Err)
				}
			}
		}
	}
}
