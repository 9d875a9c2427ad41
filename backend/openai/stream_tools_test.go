package openai_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/llmsim"
)

// lookupSchema is the strict schema of the tool the streamed tests call.
const lookupSchema = `{"type":"object","properties":{"name":{"type":"string"},"year":{"type":"integer"}},"required":["name","year"],"additionalProperties":false}`

func lookupRequest(r *batcher.Request) *batcher.Request {
	r.MutableChat().Tools = []batcher.Tool{{Name: "lookup", Strict: true, Parameters: []byte(lookupSchema)}}
	r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "lookup"}
	return r
}

// TestStreamToolCallFromLLMSim: llmsim's streamed tool call reaches the
// DeltaWriter as tool-call pieces (the header first, then the arguments'
// fragments) and the Response as the assembled call, equal to the
// unstreamed call's, with the finish reason tool_calls.
func TestStreamToolCallFromLLMSim(t *testing.T) {
	_, url := startSim(t, llmsim.Config{})
	be := newBackend(t, openai.Config{BaseURL: url})
	whole, _, err := dispatch(t.Context(), be, "r", "sim-chat", 64, lookupRequest(chat("r", "Look up Ada Lovelace")))
	if err != nil || whole[0].Err != nil || len(whole[0].ChatOutput().ToolCalls) != 1 {
		t.Fatalf("unstreamed: %+v, %v", whole, err)
	}
	want := whole[0].ChatOutput().ToolCalls[0]
	l := newDeltaLog()
	resp, err := be.Stream(t.Context(), streamBatch(lookupRequest(chat("r", "Look up Ada Lovelace"))), l)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.tools) < 3 || l.tools[0].ID != want.ID || l.tools[0].Name != "lookup" || l.tools[0].Arguments != "" {
		t.Fatalf("pieces %+v: want the header first, then fragments", l.tools)
	}
	var args strings.Builder
	for i, p := range l.tools {
		if p.Index != 0 || i > 0 && (p.ID != "" || p.Name != "") {
			t.Fatalf("piece %d %+v", i, p)
		}
		args.WriteString(p.Arguments)
	}
	if args.String() != want.Arguments || l.text() != "" {
		t.Fatalf("fragments make %q (text %q), want %q", args.String(), l.text(), want.Arguments)
	}
	if len(resp.ChatOutput().ToolCalls) != 1 || resp.ChatOutput().ToolCalls[0] != want || resp.FinishReason != batcher.FinishToolCalls {
		t.Fatalf("response %+v, want the call %+v and finish tool_calls", resp, want)
	}
}

// TestStreamToolCallChecked: a streamed answer is checked whole as an
// unstreamed one is: arguments that are not JSON (llmsim's
// ToolCallMalformedRate) or that break the strict schema
// (SchemaViolationRate), and a call of a tool the request did not offer,
// are invalid_response, after the pieces were written.
func TestStreamToolCallChecked(t *testing.T) {
	for name, tt := range map[string]struct {
		cfg    llmsim.Config
		req    func() *batcher.Request
		reason string
	}{
		"malformed arguments": {llmsim.Config{ToolCallMalformedRate: 1}, func() *batcher.Request {
			return lookupRequest(chat("r", "Look up Ada Lovelace"))
		}, "arguments are not JSON"},
		"schema violation": {llmsim.Config{SchemaViolationRate: 1}, func() *batcher.Request {
			return lookupRequest(chat("r", "Look up Ada Lovelace"))
		}, "break the strict schema"},
		"json_schema answer breaks the schema": {llmsim.Config{SchemaViolationRate: 1}, func() *batcher.Request {
			r := chat("r", "Describe Ada Lovelace")
			r.MutableChat().ResponseFormat = batcher.ResponseFormat{Type: batcher.FormatJSONSchema, Name: "person", Strict: true, Schema: []byte(lookupSchema)}
			return r
		}, "breaks the strict schema"},
	} {
		t.Run(name, func(t *testing.T) {
			_, url := startSim(t, tt.cfg)
			be := newBackend(t, openai.Config{BaseURL: url})
			l := newDeltaLog()
			_, err := be.Stream(t.Context(), streamBatch(tt.req()), l)
			if batcher.ClassOf(err) != batcher.ClassInvalidResponse || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("err %v (class %v), want invalid_response: %s", err, batcher.ClassOf(err), tt.reason)
			}
			if len(l.tools) == 0 && l.text() == "" {
				t.Fatal("nothing was streamed before the check")
			}
		})
	}
}

// TestStreamedToolCallThroughTheService: a streamed chat request with a
// tool, from the Go client over gRPC through the core to llmsim: the
// client sees tool-call deltas (the header, then the arguments'
// fragments), and a completion whose message holds the call those
// deltas make, with FINISH_REASON_TOOL_CALLS. A call whose arguments are
// not JSON ends the request partial, with the pieces streamed so far.
func TestStreamedToolCallThroughTheService(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  llmsim.Config
		ok   bool
	}{{"call", llmsim.Config{}, true}, {"malformed arguments", llmsim.Config{ToolCallMalformedRate: 1}, false}} {
		t.Run(tt.name, func(t *testing.T) {
			_, url := startSim(t, tt.cfg)
			be := newBackend(t, openai.Config{BaseURL: url})
			core := newCore(t, []batcher.BackendConfig{{Name: "up", Backend: be}},
				[]batcher.Route{{Name: "gpt", Op: batcher.OpChat, Backend: "up", Model: "sim-chat"}})
			c := client.New(grpcConn(t, core))
			tool, err := client.Tool("lookup", "Finds a person's record.", json.RawMessage(lookupSchema))
			if err != nil {
				t.Fatal(err)
			}
			tool.Strict = true
			req := client.Chat("gpt", client.User("Look up Ada Lovelace"), client.WithTools(tool), client.WithToolChoice("lookup"))
			req.Stream = true
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var pieces []*batcherv1.ToolCallDelta
			var text strings.Builder
			comp, err := c.SubmitStreamed(ctx, req, func(d *batcherv1.Delta) {
				pieces = append(pieces, d.GetToolCalls()...)
				text.WriteString(d.GetText())
			})
			if len(pieces) < 3 || pieces[0].GetId() == "" || pieces[0].GetName() != "lookup" || text.Len() != 0 {
				t.Fatalf("pieces %v, text %q: want the call's header, then fragments", pieces, text.String())
			}
			var args strings.Builder
			for _, p := range pieces {
				args.WriteString(p.GetArguments())
			}
			if !tt.ok {
				if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "arguments are not JSON") || !comp.GetPartial() {
					t.Fatalf("err %v, completion %v: want INTERNAL (invalid response), partial", err, comp)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res := client.ChatResultOf(comp)
			want := &batcherv1.ToolCall{Id: pieces[0].GetId(), Name: "lookup", Arguments: args.String()}
			if len(res.ToolCalls) != 1 || !proto.Equal(res.ToolCalls[0], want) || res.FinishReason != batcherv1.FinishReason_FINISH_REASON_TOOL_CALLS {
				t.Fatalf("result %+v, want the call %v the deltas make", res, want)
			}
			var v struct {
				Name string `json:"name"`
				Year int    `json:"year"`
			}
			if err := client.DecodeArguments(res.ToolCalls[0], &v); err != nil || v.Name == "" {
				t.Fatalf("arguments %q: %v", res.ToolCalls[0].GetArguments(), err)
			}
		})
	}
}
