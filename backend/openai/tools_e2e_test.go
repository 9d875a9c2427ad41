package openai_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// TestToolRequestsFanOutNeverPack is the figure: 1,000 concurrent
// tool-call requests, mixed with 1,000 plain ones, through a packing route
// against llmsim. Every tool request's answer calls its own function with
// its own arguments (0 wrong answers), and no upstream call that carried a
// tool request carried anything else (0 packs with a tool request), while
// the plain requests did pack.
func TestToolRequestsFanOutNeverPack(t *testing.T) {
	const n = 1000
	sim, err := llmsim.New(llmsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var withTools, toolsInPack, calls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			Tools    []json.RawMessage `json:"tools"`
			Messages []json.RawMessage `json:"messages"`
		}
		_ = json.Unmarshal(body, &m)
		calls.Add(1)
		if len(m.Tools) > 0 {
			withTools.Add(1)
		}
		// A tool request's user turn in a call that is not its own.
		if k := bytes.Count(body, []byte("Look up record")); k > 1 || k == 1 && len(m.Tools) != 1 {
			toolsInPack.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { sim.Close(); ts.Close() })
	be := newBackend(t, openai.Config{BaseURL: ts.URL + "/v1", MaxFanOut: 64, Timeout: time.Minute, Pack: openai.PackConfig{Enabled: true, MaxItems: 20}})
	core := newCore(t, []batcher.BackendConfig{{Name: "openai-main", Backend: be, MaxConcurrency: 32}}, []batcher.Route{{
		Name: "gpt", Op: batcher.OpChat, Backend: "openai-main", Model: "sim-chat", DefaultMaxTokens: 64,
		Batch: batcher.BatchConfig{MaxBatchSize: 100, Window: 20 * time.Millisecond, MaxWait: time.Second},
	}}, batcher.WithQueueCapacity(4*n))
	reqs := make([]*batcher.Request, 2*n)
	for i := range n {
		r := chat("gpt", fmt.Sprintf("Look up record %d.", i), "Answer in one line.")
		r.MutableChat().Tools = []batcher.Tool{{Name: fmt.Sprintf("lookup_%d", i), Strict: true, Parameters: []byte(fmt.Sprintf(
			`{"type":"object","properties":{"record":{"type":"string","const":"r%d"},"n":{"type":"integer","const":%d}},"required":["record","n"],"additionalProperties":false}`, i, i))}}
		r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: r.ChatOptions().Tools[0].Name}
		reqs[2*i] = r
		reqs[2*i+1] = chat("gpt", fmt.Sprintf("Short question %d?", i), "Answer in one line.")
	}
	results := doAll(t, core, reqs)
	wrong, plainFailed := 0, 0
	for i := range n {
		res := results[2*i]
		want := fmt.Sprintf(`{"n":%d,"record":"r%d"}`, i, i)
		if res.Err != nil || len(res.ChatOutput().ToolCalls) != 1 || res.ChatOutput().ToolCalls[0].Name != fmt.Sprintf("lookup_%d", i) ||
			res.ChatOutput().ToolCalls[0].Arguments != want || res.FinishReason != batcher.FinishToolCalls {
			wrong++
			if wrong < 5 {
				t.Errorf("request %d: %+v, %v; want a call of lookup_%d with %s", i, res.ChatOutput().ToolCalls, res.Err, i, want)
			}
		}
		if p := results[2*i+1]; p.Err != nil || p.Text == "" {
			plainFailed++
		}
	}
	st := sim.Stats()
	t.Logf("%d tool requests: %d wrong answers, %d upstream calls with tools, %d of them packed or shared; "+
		"plain: %d packs of %d items, %d failed; %d upstream calls in all",
		n, wrong, withTools.Load(), toolsInPack.Load(), st.Packed, st.PackedItems, plainFailed, calls.Load())
	if wrong != 0 || withTools.Load() < n || toolsInPack.Load() != 0 {
		t.Fatalf("%d wrong, %d calls with tools (want %d), %d tool requests shared a call", wrong, withTools.Load(), n, toolsInPack.Load())
	}
	if st.Packed == 0 {
		t.Fatal("the plain requests never packed: the test shows nothing")
	}
}

// TestLLMSimToolFaultsAreInvalidResponses: llmsim's malformed tool-call
// arguments and schema-violating answers reach the core as
// invalid_response.
func TestLLMSimToolFaultsAreInvalidResponses(t *testing.T) {
	for name, cfg := range map[string]llmsim.Config{
		"malformed arguments": {ToolCallMalformedRate: 1},
		"schema violation":    {SchemaViolationRate: 1},
	} {
		_, url := startSim(t, cfg)
		be := newBackend(t, openai.Config{BaseURL: url})
		r := chat("gpt", "call lookup please")
		r.MutableChat().Tools = []batcher.Tool{{Name: "lookup", Strict: true, Parameters: []byte(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`)}}
		r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceRequired}
		out, _, err := dispatch(t.Context(), be, "gpt", "sim-chat", 64, r)
		if err == nil {
			err = out[0].Err
		}
		if batcher.ClassOf(err) != batcher.ClassInvalidResponse {
			t.Errorf("%s: %v, want invalid_response", name, err)
		}
	}
}
