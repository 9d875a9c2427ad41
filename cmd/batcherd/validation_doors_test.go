package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
)

// messageRule is a rule on chat messages that the core holds (batcher's
// chat validation) and so every door applies: a row set of
// TestEveryDoorRefusesBadMessages.
type messageRule struct {
	name     string
	messages []*batcherv1.ChatMessage // as the gRPC doors take them
	json     string                   // the same messages as the OpenAI doors take them
	field    string                   // the bad field, from "messages" on, as every door names it
	reason   string                   // what the refusal says of it
}

var messageRules = []messageRule{
	{
		name: "tool message without tool_call_id",
		messages: []*batcherv1.ChatMessage{{Role: "user", Content: "weather?"},
			{Role: "assistant", ToolCalls: []*batcherv1.ToolCall{{Id: "c1", Name: "get_weather", Arguments: "{}"}}},
			{Role: "tool", Content: "sunny"}},
		json: `[{"role": "user", "content": "weather?"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
			{"role": "tool", "content": "sunny"}]`,
		field:  "messages[2].tool_call_id",
		reason: "required for role tool",
	},
}

// validationDoor is one way into batcherd that takes chat messages: a row
// of TestEveryDoorRefusesBadMessages. send sends the rule's messages and
// returns the refusal: a gRPC status, or an HTTP status and the text that
// names the field (for a batch, its error file).
type validationDoor struct {
	name   string
	method string // the gRPC method, or "" for an HTTP door
	send   func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal
}

func chatOf(r messageRule) *batcherv1.Request {
	return &batcherv1.Request{Model: "sim-chat", Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: r.messages}}}
}

// chatJSON is a chat completion's body with the rule's messages, on one
// line (a batch file's line).
func chatJSON(t *testing.T, r messageRule) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(`{"model": "sim-chat", "max_tokens": 4, "messages": `+r.json+`}`)); err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	return b.String()
}

func validationDoors() []validationDoor {
	return []validationDoor{
		{"Submit", batcherv1.BatcherService_Submit_FullMethodName, func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal {
			return e.submit(t, tok, chatOf(r))
		}},
		{"SubmitStream", batcherv1.BatcherService_SubmitStream_FullMethodName, func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal {
			return e.stream(t, tok, chatOf(r))
		}},
		{"SubmitStreamed", batcherv1.BatcherService_SubmitStreamed_FullMethodName, func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal {
			return e.streamed(t, tok, chatOf(r))
		}},
		{"CreateJob items", batcherv1.JobService_CreateJob_FullMethodName, func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal {
			// fail_on_invalid: the item's refusal is CreateJob's answer
			// rather than an error line.
			return e.createJob(t, tok, &batcherv1.JobSpec{Model: "sim-chat", FailOnInvalid: true}, items(chatOf(r)))
		}},
		{"/v1/chat/completions", "", func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal {
			return e.post(t, tok, "/v1/chat/completions", chatJSON(t, r), "")
		}},
		{"/v1/batches", "", func(t *testing.T, e *tenantsEnv, tok string, r messageRule) refusal {
			return e.batchErrorLine(t, tok, batchLine("bad", "/v1/chat/completions", chatJSON(t, r)))
		}},
	}
}

// batchErrorLine runs a batch of one chat line and returns its error
// line's message, with status 400 when the line was refused as an invalid
// request.
func (e *tenantsEnv) batchErrorLine(t *testing.T, tok, line string) refusal {
	t.Helper()
	return e.batchErrorLineOn(t, tok, "/v1/chat/completions", line)
}

// batchErrorLineOn is batchErrorLine for a batch of endpoint.
func (e *tenantsEnv) batchErrorLineOn(t *testing.T, tok, endpoint, line string) refusal {
	t.Helper()
	r := e.batch(t, tok, endpoint, line)
	var b struct {
		ID, Status  string
		ErrorFileID string `json:"error_file_id"`
	}
	if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &b) != nil {
		return r
	}
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for b.Status != "completed" && b.Status != "failed" {
		if time.Now().After(deadline) {
			t.Fatalf("batch %s still %s after %v", b.ID, b.Status, testTimeout)
		}
		<-tick.C
		code, body := e.do(t, "GET", "https://"+e.httpAddr+"/v1/batches/"+b.ID, tok, "", nil)
		if code != http.StatusOK || json.Unmarshal([]byte(body), &b) != nil {
			t.Fatalf("get batch: %d %s", code, body)
		}
	}
	if b.ErrorFileID == "" {
		return refusal{code: http.StatusOK, body: "batch " + b.Status + " without an error file"}
	}
	code, body := e.do(t, "GET", "https://"+e.httpAddr+"/v1/files/"+b.ErrorFileID+"/content", tok, "", nil)
	var l struct {
		Error struct{ Code, Message string }
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &l) != nil {
		t.Fatalf("error file: %d %s", code, body)
	}
	if l.Error.Code != jobs.CodeInvalidRequest {
		return refusal{code: http.StatusOK, body: body}
	}
	return refusal{code: http.StatusBadRequest, body: l.Error.Message}
}

// TestEveryDoorRefusesBadMessages: each rule on chat messages is applied
// at every door, INVALID_ARGUMENT or 400 (for a batch, an invalid_request
// error line) naming the field and why. Every gRPC method whose request
// carries a Request or a JobSpec must have a row.
func TestEveryDoorRefusesBadMessages(t *testing.T) {
	e := startTenants(t)
	doors := validationDoors()
	methods := map[string]bool{}
	for _, d := range doors {
		methods[d.method] = true
	}
	for _, m := range requestMethods(t) {
		if !methods[m] {
			t.Errorf("gRPC method %s carries a Request or a JobSpec but has no row in validationDoors", m)
		}
	}
	for _, rule := range messageRules {
		for _, d := range doors {
			t.Run(rule.name+"/"+d.name, func(t *testing.T) {
				r := d.send(t, e, e.tokA, rule)
				if d.method != "" {
					s := status.Convert(r.err)
					if s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), rule.field) || !strings.Contains(s.Message(), rule.reason) {
						t.Errorf("got %v, want INVALID_ARGUMENT naming %s: %s", r.err, rule.field, rule.reason)
					}
					return
				}
				if r.code != http.StatusBadRequest || !strings.Contains(r.body, rule.field) || !strings.Contains(r.body, rule.reason) {
					t.Errorf("got %d %s, want 400 naming %s: %s", r.code, r.body, rule.field, rule.reason)
				}
			})
		}
	}
	e.finish(t)
}
