package openai_test

import (
	"testing"

	"github.com/batcherhq/batcher/backend/backendtest"
	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
)

// TestContract runs the backend contract (package backendtest) against
// llmsim's /v1/chat/completions.
func TestContract(t *testing.T) {
	backendtest.Run(t, backendtest.Target{
		New: func(t testing.TB, baseURL string) batcher.Backend {
			return newBackend(t, openai.Config{BaseURL: baseURL + "/v1"})
		},
		JSON:             true,
		StreamsToolCalls: true,
	})
}

// TestBatchContract runs the batched contract against llmsim's /v1/files
// and /v1/batches.
func TestBatchContract(t *testing.T) {
	backendtest.RunBatch(t, backendtest.BatchTarget{
		New: func(t testing.TB, baseURL string) batchapi.Upstream {
			return newBackend(t, openai.Config{BaseURL: baseURL + "/v1"}).Batches()
		},
	})
}

// TestParseBatchLineToolCall: an output line whose answer is a tool call
// with content null (as OpenAI sends it) is that call, not a broken line.
func TestParseBatchLineToolCall(t *testing.T) {
	line := `{"custom_id":"a","response":{"status_code":200,"body":{"object":"chat.completion","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},` +
		`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":3}}},"error":null}`
	r, err := openai.ParseBatchLine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != batchapi.Succeeded || len(r.Resp.ChatOutput().ToolCalls) != 1 || r.Resp.ChatOutput().ToolCalls[0].Arguments != `{"x":1}` ||
		r.Resp.FinishReason != batcher.FinishToolCalls || r.Resp.Usage.CompletionTokens != 3 {
		t.Errorf("got %+v", r)
	}
}

// TestParseBatchLineRich: an output line's refusal, logprobs and several
// choices come back whole, as the online call's answer would.
func TestParseBatchLineRich(t *testing.T) {
	line := `{"custom_id":"a","response":{"status_code":200,"body":{"object":"chat.completion","choices":[` +
		`{"index":1,"message":{"role":"assistant","content":null,"refusal":"I cannot help with that."},"finish_reason":"stop"},` +
		`{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop",` +
		`"logprobs":{"content":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[]}]}}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":4}}},"error":null}`
	r, err := openai.ParseBatchLine([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != batchapi.Succeeded || r.Resp.Text != "Hi" || len(r.Resp.ChatOutput().Choices) != 2 || r.Resp.Usage.CompletionTokens != 4 {
		t.Fatalf("got %+v", r.Resp)
	}
	if lp := r.Resp.ChatOutput().Logprobs; lp == nil || len(lp.Content) != 1 || lp.Content[0].Token != "Hi" || lp.Content[0].Logprob != -0.25 {
		t.Errorf("logprobs %+v", r.Resp.ChatOutput().Logprobs)
	}
	if c := r.Resp.ChatOutput().Choices[1]; c.Refusal != "I cannot help with that." || c.FinishReason != batcher.FinishContentFilter {
		t.Errorf("choice 1 %+v, want the refusal", c)
	}
}
