package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// requestRule is a rule on a request's fields, held once (the core's
// validation, or the front door's reading of a body, which batch lines
// share), that every door taking such a request applies: a row set of
// TestEveryDoorAppliesRequestRules.
type requestRule struct {
	name string
	grpc func() *batcherv1.Request // the request as the gRPC doors take it; nil: they cannot express it
	url  string                    // the OpenAI endpoint of body
	body string                    // the request as the OpenAI doors take it, on one line
	// field is the bad field as the gRPC doors name it (after
	// "request."), param as the OpenAI doors do (a batch line's after
	// "body."); reason is what every door says of it.
	field, param, reason string
	// at is, for a door that refuses the request by an earlier rule of its
	// own, the field (or param) and reason it names instead.
	at map[string][2]string
}

var requestRules = []requestRule{
	{
		name: "generation parameter on embeddings",
		grpc: func() *batcherv1.Request {
			half := float32(0.5)
			r := embedItem("sim-embed", batcherv1.Priority_PRIORITY_UNSPECIFIED)
			r.Params = &batcherv1.GenerationParams{Temperature: &half}
			return r
		},
		url: "/v1/embeddings", body: `{"model": "sim-embed", "input": "hi", "temperature": 0.5}`,
		field: "params.temperature", param: "temperature", reason: `route "sim-embed" serves embeddings, which take no generation parameters`,
		// The OpenAI doors read an embeddings body with one decoder,
		// which refuses a field /v1/embeddings does not read by name
		// before the core sees it.
		at: map[string][2]string{
			"/v1/embeddings":         {"temperature", "is not a parameter Batcher serves on /v1/embeddings"},
			"CreateJob OpenAI lines": {"body.temperature", "is not a parameter Batcher serves on /v1/embeddings"},
			"/v1/batches":            {"body.temperature", "is not a parameter Batcher serves on /v1/embeddings"},
		},
	},
	{
		name: "n above 1 on completions",
		grpc: func() *batcherv1.Request {
			two := int32(2)
			return &batcherv1.Request{Model: "sim-completion", Params: &batcherv1.GenerationParams{N: &two},
				Input: &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: "hi"}}}
		},
		url: "/v1/completions", body: `{"model": "sim-completion", "prompt": "hi", "n": 2}`,
		field: "params.n", param: "n", reason: "only chat routes answer several choices, this one takes completion input",
	},
	{
		name: "n of 0 (completions)",
		url:  "/v1/completions", body: `{"model": "sim-completion", "prompt": "hi", "n": 0}`,
		param: "n", reason: "must be 1 to 8, got 0",
	},
	{
		name: "n of 0 (chat)",
		url:  "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "n": 0}`,
		param: "n", reason: "must be 1 to 8, got 0",
	},
	{
		name: "max_completion_tokens of 0 (completions)",
		url:  "/v1/completions", body: `{"model": "sim-completion", "prompt": "hi", "max_completion_tokens": 0}`,
		param: "max_completion_tokens", reason: "must be at least 1, got 0",
	},
	{
		// OpenAI's bound on a request's metadata, where a door speaks
		// OpenAI's contract; the gRPC doors keep their documented 32.
		name: "metadata over OpenAI's 16 entries (chat)",
		url:  "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "metadata": ` + manyPairs(17) + `}`,
		param: "metadata", reason: "must hold at most 16 entries, got 17",
	},
	{
		name: "metadata over OpenAI's 16 entries (completions)",
		url:  "/v1/completions", body: `{"model": "sim-completion", "prompt": "hi", "metadata": ` + manyPairs(17) + `}`,
		param: "metadata", reason: "must hold at most 16 entries, got 17",
	},
	{
		name: "max_tokens of 0",
		grpc: func() *batcherv1.Request {
			zero := int32(0)
			r := chatItem("sim-chat")
			r.Params = &batcherv1.GenerationParams{MaxTokens: &zero}
			return r
		},
		url: "/v1/completions", body: `{"model": "sim-completion", "prompt": "hi", "max_tokens": 0}`,
		field: "params.max_tokens", param: "max_tokens", reason: "must be at least 1, got 0",
	},
	{
		name: "max_tokens and max_completion_tokens differ (completions)",
		url:  "/v1/completions", body: `{"model": "sim-completion", "prompt": "hi", "max_tokens": 5, "max_completion_tokens": 7}`,
		param: "max_tokens", reason: "is 5 and max_completion_tokens 7: set one",
	},
	{
		name: "max_tokens and max_completion_tokens differ (chat)",
		url:  "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "max_completion_tokens": 7}`,
		param: "max_tokens", reason: "is 5 and max_completion_tokens 7: set one",
	},
	{
		name: "tool_choice auto without tools",
		grpc: func() *batcherv1.Request {
			r := chatItem("sim-chat")
			r.ToolChoice = &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Mode{Mode: batcherv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}}
			return r
		},
		url: "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"}`,
		field: "tool_choice", param: "tool_choice", reason: "auto needs tools: tool_choice is only allowed when tools are given",
	},
	{
		name: "tool_choice naming a function without tools",
		grpc: func() *batcherv1.Request {
			r := chatItem("sim-chat")
			r.ToolChoice = &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Function{Function: "get_weather"}}
			return r
		},
		url: "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}`,
		field: "tool_choice", param: "tool_choice", reason: "needs tools: tool_choice is only allowed when tools are given",
	},
	{
		name: "parallel_tool_calls without tools",
		grpc: func() *batcherv1.Request {
			r := chatItem("sim-chat")
			no := false
			r.ParallelToolCalls = &no
			return r
		},
		url: "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": false}`,
		field: "parallel_tool_calls", param: "parallel_tool_calls", reason: "needs tools: parallel_tool_calls is only allowed when tools are given",
	},
	{
		name: "metadata key empty",
		grpc: func() *batcherv1.Request {
			r := chatItem("sim-chat")
			r.Metadata = map[string]string{"": "v"}
			return r
		},
		url: "/v1/chat/completions", body: `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "metadata": {"": "v"}}`,
		field: "metadata", param: "metadata", reason: `keys must be 1 to 64 bytes, got 0`,
	},
}

// jobMetadataRule is a rule on a job's metadata (jobs.CheckMetadata, on
// batcher.CheckMetadata) that every way to create a job applies: a row
// set of TestEveryDoorAppliesRequestRules.
type jobMetadataRule struct {
	name string
	md   map[string]string
	// reason is what every door says, after the field ("spec.metadata"
	// over gRPC, "metadata" on the Batch API); at holds a door's own.
	reason string
	at     map[string]string
}

func jobMetadataRules() []jobMetadataRule {
	many := map[string]string{}
	for i := range batcher.MaxMetadataEntries + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	return []jobMetadataRule{
		{name: "empty key", md: map[string]string{"": "v"}, reason: `: key "": keys must be 1 to 64 bytes, got 0`},
		{name: "long key", md: map[string]string{strings.Repeat("k", 65): "v"}, reason: `: key "` + strings.Repeat("k", 64) + `...": keys must be 1 to 64 bytes, got 65`},
		{name: "long value", md: map[string]string{"team": strings.Repeat("v", 513)}, reason: `[team]: must be at most 512 bytes, got 513`},
		{name: "reserved key", md: map[string]string{"team": "a", "batcher.openai.endpoint": "/v1/embeddings"},
			reason: `: key "batcher.openai.endpoint": keys beginning with "batcher." are reserved for Batcher's own`},
		// OpenAI's contract bounds a batch's metadata at 16 pairs.
		{name: "entries", md: many, reason: ": must hold at most 32 entries, got 33",
			at: map[string]string{"/v1/batches": ": must hold at most 16 entries, got 33"}},
	}
}

// jobDoor is one way to create a job with metadata: send returns its
// refusal; field is what it calls the metadata.
type jobDoor struct {
	name, field string
	send        func(t *testing.T, e *tenantsEnv, md map[string]string) refusal
}

func jobDoors() []jobDoor {
	return []jobDoor{
		{"CreateJob", "spec.metadata", func(t *testing.T, e *tenantsEnv, md map[string]string) refusal {
			return e.createJob(t, e.tokA, &batcherv1.JobSpec{Model: "sim-chat", Metadata: md}, items(chatItem("sim-chat")))
		}},
		{"/v1/batches", "metadata", func(t *testing.T, e *tenantsEnv, md map[string]string) refusal {
			b, _ := json.Marshal(md)
			return e.batchWith(t, e.tokA, "/v1/chat/completions", `, "metadata": `+string(b), batchLine("x", "/v1/chat/completions", chatBody))
		}},
	}
}

// ruleDoor is one way into batcherd for a requestRule: send returns its
// refusal. grpc says whether it takes the rule's gRPC request (and so
// answers a status) or its OpenAI body (an HTTP status and text).
type ruleDoor struct {
	name   string
	method string // the gRPC method, or ""
	grpc   bool
	send   func(t *testing.T, e *tenantsEnv, r requestRule) refusal
}

func ruleDoors() []ruleDoor {
	job := func(t *testing.T, e *tenantsEnv, it *batcherv1.JobItems) refusal {
		// fail_on_invalid: the item's refusal is CreateJob's answer, at
		// creation, not an error line when it runs.
		return e.createJob(t, e.tokA, &batcherv1.JobSpec{FailOnInvalid: true}, it)
	}
	return []ruleDoor{
		{"Submit", batcherv1.BatcherService_Submit_FullMethodName, true, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return e.submit(t, e.tokA, r.grpc())
		}},
		{"SubmitStream", batcherv1.BatcherService_SubmitStream_FullMethodName, true, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return e.stream(t, e.tokA, r.grpc())
		}},
		{"SubmitStreamed", batcherv1.BatcherService_SubmitStreamed_FullMethodName, true, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return e.streamed(t, e.tokA, r.grpc())
		}},
		{"CreateJob items", batcherv1.JobService_CreateJob_FullMethodName, true, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return job(t, e, items(r.grpc()))
		}},
		{"CreateJob OpenAI lines", batcherv1.JobService_CreateJob_FullMethodName, false, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return job(t, e, &batcherv1.JobItems{OpenaiLines: []*batcherv1.OpenAIBatchLine{{Line: []byte(batchLine("x", r.url, r.body))}}})
		}},
		{"front door", "", false, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return e.post(t, e.tokA, r.url, r.body, "")
		}},
		{"/v1/batches", "", false, func(t *testing.T, e *tenantsEnv, r requestRule) refusal {
			return e.batchErrorLineOn(t, e.tokA, r.url, batchLine("x", r.url, r.body))
		}},
	}
}

// TestEveryDoorAppliesRequestRules: each rule on a request's fields is
// applied at every door that takes such a request, INVALID_ARGUMENT or 400
// (for a batch, an invalid_request error line written at creation) naming
// the field and why: none serves the request without what the caller
// sent. Every gRPC method whose request carries a Request must have a
// row.
func TestEveryDoorAppliesRequestRules(t *testing.T) {
	e := startTenants(t)
	doors := ruleDoors()
	methods := map[string]bool{}
	for _, d := range doors {
		methods[d.method] = true
	}
	for _, m := range requestMethods(t) {
		if !methods[m] {
			t.Errorf("gRPC method %s carries a Request or a JobSpec but has no row in ruleDoors", m)
		}
	}
	for _, rule := range requestRules {
		for _, d := range doors {
			if d.grpc && rule.grpc == nil {
				continue // the gRPC request has one field where the body has two
			}
			t.Run(rule.name+"/"+d.name, func(t *testing.T) {
				field, reason := "request."+rule.field, rule.reason
				if !d.grpc {
					field = "body." + rule.param
				}
				if d.name == "front door" {
					field = `"param":"` + rule.param + `"`
				}
				key := d.name
				if key == "front door" {
					key = rule.url
				}
				if o, ok := rule.at[key]; ok {
					field, reason = o[0], o[1]
				}
				r := d.send(t, e, rule)
				if d.method != "" {
					s := status.Convert(r.err)
					if s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), field) || !strings.Contains(s.Message(), reason) {
						t.Errorf("got %v, want INVALID_ARGUMENT naming %s: %s", r.err, field, reason)
					}
					return
				}
				if r.code != http.StatusBadRequest || !strings.Contains(r.body, field) || !strings.Contains(r.body, reason) {
					t.Errorf("got %d %s, want 400 naming %s: %s", r.code, r.body, field, reason)
				}
			})
		}
	}
	for _, rule := range jobMetadataRules() {
		for _, d := range jobDoors() {
			t.Run("job metadata "+rule.name+"/"+d.name, func(t *testing.T) {
				want := d.field + rule.reason
				if r, ok := rule.at[d.name]; ok {
					want = d.field + r
				}
				r := d.send(t, e, rule.md)
				if r.err != nil || r.code == 0 {
					if s := status.Convert(r.err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), want) {
						t.Errorf("got %v, want INVALID_ARGUMENT saying %s", r.err, want)
					}
					return
				}
				if r.code != http.StatusBadRequest || !strings.Contains(r.body, `"param":"metadata"`) || !strings.Contains(r.body, jsonText(want)) {
					t.Errorf("got %d %s, want 400 on param metadata saying %s", r.code, r.body, want)
				}
			})
		}
	}
	e.finish(t)
}

// manyPairs is a JSON object of n metadata pairs.
func manyPairs(n int) string {
	md := map[string]string{}
	for i := range n {
		md[fmt.Sprint("k", i)] = "v"
	}
	b, _ := json.Marshal(md)
	return string(b)
}

// jsonText is s as it shows inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// idRule is an id that breaks the rule on ids every door applies
// (batcher.CheckID): a request's id on the gRPC doors, a job item's custom
// id (a CreateJob item's id, a batch line's custom_id). reason is what
// the doors that take live requests say (ids of at most 128 bytes); job
// is what the job doors say (custom ids of at most 512 bytes).
type idRule struct {
	name, id, reason, job string
}

func idRules() []idRule {
	return []idRule{
		{name: "newline", id: "a\nb",
			reason: "must be printable text of at most 128 bytes, without control characters: got U+000A at byte 1",
			job:    "must be printable text of at most 512 bytes, without control characters: got U+000A at byte 1"},
		{name: "DEL", id: "ab\x7f",
			reason: "without control characters: got U+007F at byte 2", job: "without control characters: got U+007F at byte 2"},
		{name: "line separator", id: "a\u2028b",
			reason: "without control characters: got U+2028 at byte 1", job: "without control characters: got U+2028 at byte 1"},
		{name: "absurd length", id: strings.Repeat("i", 600),
			reason: "must be at most 128 bytes, got 600", job: "must be at most 512 bytes, got 600"},
	}
}

// TestEveryDoorAppliesTheIDRule: an id that breaks the rule on ids is
// refused at every door that takes a caller's id, INVALID_ARGUMENT or 400
// (for a batch, an invalid_request error line, which cannot carry the
// id) naming the field and the limit. The front door takes no caller's
// id (it names each request itself), so its row checks that the ids it
// makes keep the rule; an id real batch files use (spaces, punctuation,
// non-ASCII) passes at every door.
func TestEveryDoorAppliesTheIDRule(t *testing.T) {
	e := startTenants(t)
	job := func(t *testing.T, it *batcherv1.JobItems) refusal {
		return e.createJob(t, e.tokA, &batcherv1.JobSpec{FailOnInvalid: true}, it)
	}
	line := func(id string) string {
		b, _ := json.Marshal(id)
		return `{"custom_id": ` + string(b) + `, "method": "POST", "url": "/v1/chat/completions", "body": ` + chatBody + `}`
	}
	withID := func(id string) *batcherv1.Request {
		r := chatItem("sim-chat")
		r.Id = id
		return r
	}
	doors := []struct {
		name, field string
		live        bool // a door of live requests (128 bytes), not of a job's items (512)
		send        func(t *testing.T, id string) refusal
	}{
		{"Submit", "request.id", true, func(t *testing.T, id string) refusal { return e.submit(t, e.tokA, withID(id)) }},
		{"SubmitStream", "request.id", true, func(t *testing.T, id string) refusal { return e.stream(t, e.tokA, withID(id)) }},
		{"SubmitStreamed", "request.id", true, func(t *testing.T, id string) refusal { return e.streamed(t, e.tokA, withID(id)) }},
		{"CreateJob items", "id", false, func(t *testing.T, id string) refusal { return job(t, items(withID(id))) }},
		{"CreateJob OpenAI lines", "custom_id", false, func(t *testing.T, id string) refusal {
			return job(t, &batcherv1.JobItems{OpenaiLines: []*batcherv1.OpenAIBatchLine{{Line: []byte(line(id))}}})
		}},
		{"/v1/batches", "custom_id", false, func(t *testing.T, id string) refusal {
			return e.batchErrorLineOn(t, e.tokA, "/v1/chat/completions", line(id))
		}},
	}
	for _, rule := range idRules() {
		for _, d := range doors {
			t.Run(rule.name+"/"+d.name, func(t *testing.T) {
				want := rule.job
				if d.live {
					want = rule.reason
				}
				r := d.send(t, rule.id)
				if r.err != nil || r.code == 0 {
					if s := status.Convert(r.err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), d.field) || !strings.Contains(s.Message(), want) {
						t.Errorf("got %v, want INVALID_ARGUMENT naming %s: %s", r.err, d.field, want)
					}
					return
				}
				if r.code != http.StatusBadRequest || !strings.Contains(r.body, d.field+": ") || !strings.Contains(r.body, want) {
					t.Errorf("got %d %s, want 400 naming %s: %s", r.code, r.body, d.field, want)
				}
			})
		}
	}
	t.Run("real ids pass", func(t *testing.T) {
		for _, id := range []string{"request-1", "doc 12: chunk 4/7", "résumé_#3", "0f8c2e9a-4b1d-4c3e-9a7f-2d6b8e1c5a90"} {
			for _, d := range doors[:3] {
				if r := d.send(t, id); r.err != nil {
					t.Errorf("%s of id %q: %v", d.name, id, r.err)
				}
			}
			if r := job(t, &batcherv1.JobItems{Requests: []*batcherv1.Request{withID(id)},
				OpenaiLines: []*batcherv1.OpenAIBatchLine{{Line: []byte(line(id + " (line)"))}}}); r.err != nil {
				t.Errorf("CreateJob of id %q: %v", id, r.err)
			}
		}
	})
	t.Run("front door ids keep the rule", func(t *testing.T) {
		r := e.post(t, e.tokA, "/v1/chat/completions", chatBody, "")
		var b struct{ ID string }
		if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &b) != nil || b.ID == "" {
			t.Fatalf("front door: %d %s", r.code, r.body)
		}
		if ve := batcher.CheckID("id", b.ID, batcher.MaxIDBytes); ve != nil {
			t.Errorf("the front door's id %q breaks the rule: %v", b.ID, ve)
		}
	})
	e.finish(t)
}
