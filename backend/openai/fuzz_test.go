package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

// roundTrip answers every call in-process, without a network.
type roundTrip func(*http.Request) (status int, body string)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	status, body := f(r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}, nil
}

func fuzzBackend(t testing.TB, cfg openai.Config, f roundTrip) *openai.Backend {
	cfg.BaseURL = "http://upstream.test/v1"
	cfg.Transport = f
	be, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// checkOut asserts Dispatch's contract on any upstream answer: a failed
// response carries no answer and a classified error, usage is never
// negative, and an all-failed batch returns an error. answered says whether
// a response holds an answer; a zero response must have one unless
// Dispatch returned an error, which fails it.
func checkOut(t *testing.T, out []batcher.Response, err error, answered func(batcher.Response) bool) {
	t.Helper()
	failed := 0
	for i, r := range out {
		if r.Usage.PromptTokens < 0 || r.Usage.CompletionTokens < 0 {
			t.Fatalf("response %d has negative usage %+v", i, r.Usage)
		}
		if r.Err != nil {
			failed++
			if answered(r) {
				t.Fatalf("response %d has an answer and an error: %+v", i, r)
			}
			if batcher.ClassOf(r.Err) == batcher.ClassUnknown {
				t.Fatalf("response %d has an unclassified error %v", i, r.Err)
			}
		} else if !answered(r) && err == nil { // a zero response is failed by a non-nil return
			t.Fatalf("response %d has neither an answer nor an error", i)
		}
	}
	if failed == len(out) && err == nil {
		t.Fatal("every response failed but Dispatch returned nil")
	}
}

func FuzzEmbeddingResponse(f *testing.F) {
	f.Add(`{"data":[{"index":0,"embedding":[0.1,0.2]},{"index":1,"embedding":[0.3]}],"usage":{"prompt_tokens":4}}`)
	f.Add(`{"data":[{"index":1,"embedding":[1]},{"index":1,"embedding":[2]},{"index":-1,"embedding":[3]}]}`)
	f.Add(`{"data":[{"embedding":[1]},{"embedding":[2]},{"embedding":[3]}],"usage":{"prompt_tokens":-7}}`)
	f.Add(`{"data":null}`)
	f.Add(`{"error":{"message":"bad"}}`)
	f.Add(`[1,2,3]`)
	f.Fuzz(func(t *testing.T, body string) {
		be := fuzzBackend(t, openai.Config{}, func(*http.Request) (int, string) { return 200, body })
		out, _, err := dispatch(context.Background(), be, "r", "m", 0, embedding("r", "a"), embedding("r", "bb"), embedding("r", "ccc"))
		checkOut(t, out, err, func(r batcher.Response) bool { return r.Embedding != nil })
	})
}

func FuzzCompletionResponse(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"text":"a","finish_reason":"stop"},{"index":1,"text":"b","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
	f.Add(`{"choices":[{"text":"a"},{"text":"b"}]}`)
	f.Add(`{"choices":[{"index":5,"text":"a"},{"index":0,"text":null}],"usage":{"prompt_tokens":99999999999999}}`)
	f.Add(`{"choices":"x"}`)
	f.Fuzz(func(t *testing.T, body string) {
		be := fuzzBackend(t, openai.Config{}, func(*http.Request) (int, string) { return 200, body })
		out, _, err := dispatch(context.Background(), be, "r", "m", 8, completion("r", "a"), completion("r", "b"))
		// An empty text is an answer; a failed response has none.
		checkOut(t, out, err, func(r batcher.Response) bool { return r.Err == nil || r.Text != "" || r.FinishReason != 0 })
	})
}

func FuzzChatResponse(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	f.Add(`{"choices":[{"index":1,"message":{"content":null,"refusal":"no"}}]}`)
	f.Add(`{"choices":[{"index":0,"message":{"content":""}}]}`)
	f.Add(`{"choices":[]}`)
	f.Add(`{"choices":[{"message":7}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		be := fuzzBackend(t, openai.Config{}, func(*http.Request) (int, string) { return 200, body })
		out, _, err := dispatch(context.Background(), be, "r", "m", 8, chat("r", "a"), chat("r", "b"))
		// Chat answers may be empty text: a success is any nil error.
		checkOut(t, out, err, func(r batcher.Response) bool { return r.Err == nil || r.Text != "" || r.FinishReason != 0 })
	})
}

// FuzzPackedReply feeds arbitrary packed replies through the backend: every
// request still ends with its own single answer or the pack's, never an
// error, whatever the reply holds.
func FuzzPackedReply(f *testing.F) {
	f.Add(`{"answers":[{"id":1,"answer":"A"},{"id":2,"answer":"B"},{"id":3,"answer":"C"}]}`)
	f.Add(`{"answers":[{"id":2,"answer":"B"},{"id":2,"answer":"B2"},{"id":9,"answer":"x"}]}`)
	f.Add("```json\n[{\"id\":\"1\",\"answer\":\"A\"},{\"id\":3,\"answer\":42}]\n```")
	f.Add(`{"answers":[{"id":1,"answer":"A"},{"id":2,"ans`)
	f.Add(`I cannot do that.`)
	f.Fuzz(func(t *testing.T, reply string) {
		content, _ := json.Marshal(reply)
		be := fuzzBackend(t, openai.Config{Pack: openai.PackConfig{Enabled: true}}, func(r *http.Request) (int, string) {
			var req struct {
				Messages []struct{ Content string }
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			text := string(content)
			if len(req.Messages) == 1 { // a single re-send
				b, _ := json.Marshal("single:" + req.Messages[0].Content)
				text = string(b)
			}
			return 200, `{"choices":[{"index":0,"message":{"content":` + text + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":20}}`
		})
		reqs := []*batcher.Request{chat("r", "one"), chat("r", "two"), chat("r", "three")}
		out, _, err := dispatch(context.Background(), be, "r", "m", 8, reqs...)
		if err != nil {
			t.Fatalf("dispatch: %v", err)
		}
		for i, r := range out {
			if r.Err != nil || strings.TrimSpace(r.Text) == "" {
				t.Fatalf("response %d = %+v", i, r)
			}
			if strings.HasPrefix(r.Text, "single:") && r.Text != "single:"+reqs[i].Input.Messages[0].Content {
				t.Fatalf("response %d got another request's single answer %q", i, r.Text)
			}
		}
		if st := be.Stats(); st.Packs != 1 || st.Calls != 1+st.Resent {
			t.Fatalf("stats %+v", st)
		}
	})
}
