package anthropic

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// FuzzReadStream feeds the SSE decoder arbitrary bodies: it must never
// panic nor hang, and either ends the stream with a stop reason or fails
// with one of its errors.
func FuzzReadStream(f *testing.F) {
	f.Add(anthropicStream)
	f.Add("data: {\"type\":\"message_start\"}\n\ndata: {\"type\":\"message_stop\"}\n\n")
	f.Add("data: {\"type\":\"error\",\"error\":{\"message\":\"x\"}}\n\n")
	f.Add("event: content_block_delta\ndata: {\"index\":-1}\n\n")
	f.Fuzz(func(t *testing.T, body string) {
		var w collect
		out, err := readStream(strings.NewReader(body), &w, failf)
		if err == nil && out.FinishReason == batcher.FinishUnspecified && !strings.Contains(body, "stop_reason") {
			t.Errorf("a stream without a stop_reason ended well: %+v", out)
		}
		if out.Usage.PromptTokens < 0 || out.Usage.CompletionTokens < 0 {
			t.Errorf("negative usage %+v", out.Usage)
		}
	})
}

// FuzzAnswer feeds the reply decoder arbitrary JSON bodies: an answer is
// either read (tool calls only of offered tools, with object arguments) or
// refused, never a panic.
func FuzzAnswer(f *testing.F) {
	f.Add(`{"type":"message","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`)
	f.Add(`{"content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"tool_use"}`)
	f.Add(`{"content":[{"type":"tool_use","name":"f","input":[1]}],"stop_reason":"tool_use","usage":{"input_tokens":-5}}`)
	b := &Backend{}
	r := &batcher.Request{Chat: &batcher.ChatOptions{Tools: []batcher.Tool{{Name: "f", Strict: true, Parameters: []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`)}}}}
	f.Fuzz(func(t *testing.T, body string) {
		var resp messagesResponse
		if json.Unmarshal([]byte(body), &resp) != nil {
			return
		}
		out, err := b.answer(&resp, r)
		if err != nil {
			return
		}
		for _, c := range out.ChatOutput().ToolCalls {
			var obj map[string]any
			if c.Name != "f" || json.Unmarshal([]byte(c.Arguments), &obj) != nil || obj == nil {
				t.Errorf("accepted tool call %+v", c)
			}
		}
		if out.Usage.PromptTokens < 0 || out.Usage.CompletionTokens < 0 {
			t.Errorf("negative usage %+v", out.Usage)
		}
	})
}

// FuzzParseRateLimit: any header values give sane limits or none.
func FuzzParseRateLimit(f *testing.F) {
	f.Add("7", "50", "49", "2026-01-02T03:04:06Z", "40000")
	f.Add("Fri, 02 Jan 2026 03:04:06 GMT", "-1", "x", "1.5s", "")
	f.Fuzz(func(t *testing.T, retry, limit, remaining, reset, tokens string) {
		h := http.Header{}
		h.Set("retry-after", retry)
		h.Set("anthropic-ratelimit-requests-limit", limit)
		h.Set("anthropic-ratelimit-requests-remaining", remaining)
		h.Set("anthropic-ratelimit-requests-reset", reset)
		h.Set("anthropic-ratelimit-tokens-remaining", tokens)
		rl := ParseRateLimit(h, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		if rl == nil {
			return
		}
		for _, d := range []time.Duration{rl.RetryAfter, rl.ResetRequests, rl.ResetTokens} {
			if d < 0 || d > maxWait {
				t.Errorf("duration %v out of [0, %v]", d, maxWait)
			}
		}
		if rl.RemainingRequests < -1 || rl.RemainingTokens < -1 || rl.LimitRequests < 0 || rl.LimitTokens < 0 {
			t.Errorf("counts %+v", rl)
		}
	})
}

// FuzzBatchResult feeds the results-line decoder arbitrary lines: each is
// a result with a custom id (an error set unless it succeeded) or an
// invalid response, never a panic.
func FuzzBatchResult(f *testing.F) {
	f.Add(`{"custom_id":"a","result":{"type":"succeeded","message":{"type":"message","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}}}`)
	f.Add(`{"custom_id":"b","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}}}`)
	f.Add(`{"custom_id":"c","result":{"type":"expired"}}`)
	f.Add(`{"custom_id":"d","result":{"type":"canceled"}}`)
	b, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := b.batchResult([]byte(line), "/v1/messages/batches/x/results")
		if err != nil {
			if batcher.ClassOf(err) != batcher.ClassInvalidResponse {
				t.Errorf("error %v is not an invalid response", err)
			}
			return
		}
		if r.CustomID == "" || (r.Type != "succeeded" && r.Resp.Err == nil) {
			t.Errorf("result %+v", r)
		}
	})
}
