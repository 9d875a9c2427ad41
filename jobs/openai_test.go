package jobs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

func TestParseOpenAILine(t *testing.T) {
	for _, tc := range []struct {
		line    string
		wantErr string
		check   func(*jobs.ItemRequest) bool
	}{
		{`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0.5,"stop":"x","seed":3}}`, "",
			func(r *jobs.ItemRequest) bool {
				return r.Model == "m" && r.Input.Op == batcher.OpChat && r.Input.Messages[0].Content == "hi" && r.Params.MaxTokens == 5 &&
					*r.Params.Temperature == 0.5 && r.Params.Stop[0] == "x" && *r.Params.Seed == 3
			}},
		{`{"custom_id":"b","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":7}}`, "",
			func(r *jobs.ItemRequest) bool {
				return r.Input.Messages[0].Content == "a\nb" && r.Params.MaxTokens == 7
			}},
		{`{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"p","stop":["a","b"]}}`, "",
			func(r *jobs.ItemRequest) bool { return r.Input.Prompt == "p" && len(r.Params.Stop) == 2 }},
		{`{"custom_id":"d","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":["t"]}}`, "",
			func(r *jobs.ItemRequest) bool { return r.Input.Op == batcher.OpEmbedding && r.Input.Text == "t" }},
		{`{"custom_id":"e","method":"GET","url":"/v1/completions","body":{}}`, "method: must be POST", nil},
		{`{"method":"POST","url":"/v1/completions","body":{}}`, "custom_id: must be set", nil},
		{`{"custom_id":"f","url":"/v1/images","body":{}}`, "url: unknown endpoint", nil},
		{`{"custom_id":"g","url":"/v1/chat/completions","body":{"messages":[]}}`, "body.messages: must hold at least one message", nil},
		{`{"custom_id":"h","url":"/v1/completions","body":{"prompt":["a","b"]}}`, "body.prompt: a batch line holds one item, got 2", nil},
		{`{"custom_id":"i","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}}`, "body.messages[0].content[0].image_url: must be set", nil},
		{`{"custom_id":"i2","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"stream":true}}`, "body.stream: must not be true", nil},
		{`{"custom_id":"i3","url":"/v1/completions","body":{"prompt":"x","tools":[]}}`, "body.tools: is not a parameter Batcher serves on /v1/completions", nil},
		{`{"custom_id":"j"} {"x":1}`, "more than one value", nil},
		// Completions and embeddings lines are read by their endpoint's
		// decoder too: what /v1/completions carries, a line carries
		// (max_completion_tokens, n for the core to judge, metadata);
		// what a line's answer cannot hold is refused by name.
		{`{"custom_id":"c2","url":"/v1/completions","body":{"prompt":"p","max_completion_tokens":9,"n":2,"metadata":{"k":"v"}}}`, "",
			func(r *jobs.ItemRequest) bool {
				return r.Params.MaxTokens == 9 && r.Params.RichParams().N == 2 && r.Metadata["k"] == "v"
			}},
		{`{"custom_id":"c3","url":"/v1/completions","body":{"prompt":"p","echo":true}}`, "body.echo: is not served in batch lines", nil},
		{`{"custom_id":"d2","url":"/v1/embeddings","body":{"input":"t","dimensions":8}}`, "body.dimensions: is not served in batch lines", nil},
		{`{"custom_id":"d3","url":"/v1/embeddings","body":{"input":"t","temperature":0.5}}`, "body.temperature: is not a parameter Batcher serves on /v1/embeddings", nil},
		// Nothing is dropped: a chat line carries what /v1/chat/completions
		// carries (the core refuses, at the job's creation, what the
		// model cannot honour), unknown fields as extra body fields.
		{`{"custom_id":"k","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"},"strict":true}},"user":"u","vendor_x":{"a":1}}}`, "",
			func(r *jobs.ItemRequest) bool {
				return len(r.Tools) == 1 && r.Tools[0].Name == "f" && string(r.Tools[0].Parameters) == `{"type":"object"}` &&
					r.ToolChoice == batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "f"} &&
					r.ParallelToolCalls != nil && !*r.ParallelToolCalls && r.ResponseFormat.Type == batcher.FormatJSONSchema &&
					r.ResponseFormat.Name == "s" && r.ResponseFormat.Strict && string(r.ResponseFormat.Schema) == `{"type":"object"}` &&
					r.User == "u" && string(r.Extra) == `{"vendor_x":{"a":1}}`
			}},
		{`{"custom_id":"l","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2,"n":3,"presence_penalty":0.5,"frequency_penalty":-1,"logit_bias":{"7":5},"reasoning_effort":"low"}}`, "",
			func(r *jobs.ItemRequest) bool {
				p := r.Params.RichParams()
				return p.Logprobs && *p.TopLogprobs == 2 && p.N == 3 && *p.PresencePenalty == 0.5 && *p.FrequencyPenalty == -1 &&
					p.LogitBias["7"] == 5 && p.ReasoningEffort == "low"
			}},
		{`{"custom_id":"m","url":"/v1/chat/completions","body":{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"y"},{"role":"user","name":"bob","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://x/i.png","detail":"low"}}]}]}}`, "",
			func(r *jobs.ItemRequest) bool {
				m := r.Input.Messages
				return len(m) == 3 && m[0].ToolCalls[0] == batcher.ToolCall{ID: "c", Name: "f", Arguments: "{}"} && m[1].ToolCallID == "c" &&
					m[1].Content == "y" && m[2].Name == "bob" && len(m[2].Parts) == 2 &&
					m[2].Parts[1] == batcher.ContentPart{Kind: batcher.PartImage, ImageURL: "https://x/i.png", Detail: "low"}
			}},
		{`nope`, "malformed JSON", nil},
	} {
		id, req, err := jobs.ParseOpenAILine([]byte(tc.line))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.line, err, tc.wantErr)
			}
			continue
		}
		if err != nil || id == "" || !tc.check(req) {
			t.Errorf("%s: got %q %+v %v", tc.line, id, req, err)
		}
	}
}

func FuzzParseOpenAILine(f *testing.F) {
	for _, s := range []string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"c","url":"/v1/completions","body":{"prompt":"p","stop":["a"]}}`,
		`{"custom_id":"d","url":"/v1/embeddings","body":{"input":"t"}}`,
		`{"custom_id":"x","url":"/v1/chat/completions","body":{"messages":[{"content":[{"type":"text","text":"\u00ff"}]}]}}`,
		`{"custom_id":"t","url":"/v1/chat/completions","body":{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"y"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}}`,
		`{"custom_id":"s","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{}}},"x":1}}`,
		`{"custom_id":"c2","url":"/v1/completions","body":{"prompt":["p"],"max_completion_tokens":3,"n":2,"metadata":{"k":"v"},"echo":false}}`,
		`{"custom_id":"d2","url":"/v1/embeddings","body":{"input":["t"],"encoding_format":"float","dimensions":null}}`,
		`{"custom_id":"a\u0007b","url":"/v1/embeddings","body":{"input":"t"}}`,
		`{`, ``, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		id, req, err := jobs.ParseOpenAILine(line)
		if err != nil {
			if req != nil {
				t.Fatalf("error %v with a request", err)
			}
			if !utf8.ValidString(err.Error()) && utf8.Valid(line) {
				t.Fatalf("error message not UTF-8: %q", err)
			}
			return
		}
		if id == "" || req == nil {
			t.Fatalf("no error, but id %q request %v", id, req)
		}
		if ve := batcher.CheckID("custom_id", id, jobs.MaxCustomIDBytes); ve != nil {
			t.Fatalf("accepted a custom_id that breaks the id rule: %v", ve)
		}
		// The request as a task stores it reads back the same.
		stored, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("encoding %+v: %v", req, err)
		}
		var back jobs.ItemRequest
		if err := json.Unmarshal(stored, &back); err != nil {
			t.Fatalf("decoding %s: %v", stored, err)
		}
		if again, _ := json.Marshal(&back); string(again) != string(stored) {
			t.Fatalf("stored %s, read back as %s", stored, again)
		}
		switch req.Input.Op {
		case batcher.OpChat:
			if len(req.Input.Messages) == 0 {
				t.Fatal("chat without messages")
			}
		case batcher.OpCompletion, batcher.OpEmbedding:
		default:
			t.Fatalf("operation %v", req.Input.Op)
		}
	})
}

// Output lines match OpenAI's: each line's response.request_id is its own,
// a line's service_tier is echoed, and a finished job records when it
// entered FINALIZING (the Batch API's finalizing_at).
func TestOpenAILinesRequestIDAndTier(t *testing.T) {
	e := newEnv(t, nil)
	line := func(id, tier string) string {
		t := ""
		if tier != "" {
			t = `,"service_tier":"` + tier + `"`
		}
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"hi"}]` + t + `}}`
	}
	j := e.create(t, jobs.Spec{}, 0, line("a", "flex"), line("b", ""), line("c", "flex"), line("d", "cheap"))
	p, _ := e.wait(t, j.ID)
	if p.Counts.Succeeded != 3 || p.Counts.Failed != 1 {
		t.Fatalf("counts %+v", p.Counts)
	}
	b, err := os.ReadFile(filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, raw := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l struct {
			CustomID string `json:"custom_id"`
			Response struct {
				RequestID string `json:"request_id"`
				Body      struct {
					ServiceTier *string `json:"service_tier"`
				} `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatal(err)
		}
		rid := l.Response.RequestID
		if !strings.HasPrefix(rid, "req_") || ids[rid] {
			t.Errorf("%s: request_id %q, want a req_ id of its own", l.CustomID, rid)
		}
		ids[rid] = true
		tier := l.Response.Body.ServiceTier
		switch l.CustomID {
		case "a", "c":
			if tier == nil || *tier != "flex" {
				t.Errorf("%s: service_tier %v, want flex echoed", l.CustomID, tier)
			}
		case "b":
			if tier != nil {
				t.Errorf("%s: service_tier %q, want none (none asked)", l.CustomID, *tier)
			}
		}
	}
	errs, err := os.ReadFile(filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ErrorsFile))
	if err != nil || !strings.Contains(string(errs), "body.service_tier") {
		t.Errorf("error file %s (%v): want line d refused naming body.service_tier", errs, err)
	}
	got, err := e.m.Get(t.Context(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.FinalizingAt.IsZero() || got.FinalizingAt.After(got.EndedAt) || !got.CancellingAt.IsZero() {
		t.Fatalf("finalizing at %v, cancelling at %v, ended at %v", got.FinalizingAt, got.CancellingAt, got.EndedAt)
	}
}
