package client

import (
	"errors"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

func TestChatToolHelpers(t *testing.T) {
	tool, err := Tool("get_weather", "Weather", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}})
	if err != nil {
		t.Fatal(err)
	}
	schema, err := JSONSchema("out", []byte(`{"type":"object"}`), true)
	if err != nil {
		t.Fatal(err)
	}
	call := &batcherv1.ToolCall{Id: "c1", Name: "get_weather", Arguments: `{"city":"Paris"}`}
	r := Chat("m", User("weather?"), WithTools(tool), WithToolChoice("get_weather"), AssistantToolCalls(call), ToolResult("c1", "sunny"), schema)
	msgs := r.GetChat().GetMessages()
	if len(msgs) != 3 || msgs[1].GetToolCalls()[0] != call || msgs[2].GetToolCallId() != "c1" || msgs[2].GetRole() != "tool" ||
		r.GetTools()[0].GetParameters().GetFields()["type"].GetStringValue() != "object" || r.GetToolChoice().GetFunction() != "get_weather" ||
		!r.GetResponseFormat().GetStrict() {
		t.Fatalf("request %v", r)
	}
	if _, err := Tool("f", "", "not an object"); err == nil {
		t.Fatal("a string schema was taken")
	}

	res := ChatResultOf(&batcherv1.Completion{Output: &batcherv1.Completion_Text{Text: ""},
		FinishReason: batcherv1.FinishReason_FINISH_REASON_TOOL_CALLS,
		Message:      &batcherv1.OutputMessage{ToolCalls: []*batcherv1.ToolCall{call}}})
	var args struct{ City string }
	if len(res.ToolCalls) != 1 || DecodeArguments(res.ToolCalls[0], &args) != nil || args.City != "Paris" || !errors.Is(res.Decode(&args), ErrNoJSON) {
		t.Fatalf("result %+v, args %+v", res, args)
	}
	var out map[string]int
	if err := ChatResultOf(&batcherv1.Completion{Output: &batcherv1.Completion_Text{Text: `{"a":1}`}}).Decode(&out); err != nil || out["a"] != 1 {
		t.Fatalf("decode: %v %v", err, out)
	}
}

// A schema that is not valid JSON says so, and where; valid JSON that is
// not an object says it must be one.
func TestJSONSchemaNotJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\n  \"type\": \"object\",\n  \"properties\": {,}\n}", `schema "out": not valid JSON: invalid character ',' looking for beginning of object key string (line 3, column 18)`},
		{`{"type":`, `schema "out": not valid JSON: unexpected end of JSON input (line 1, column 9)`},
		{`[1, 2]`, `schema "out": must be a JSON object`},
		{`null`, `schema "out": must be a JSON object`},
	} {
		_, err := JSONSchema("out", []byte(tc.in), true)
		if err == nil || err.Error() != tc.want {
			t.Errorf("JSONSchema(%q) = %v, want %s", tc.in, err, tc.want)
		}
	}
}
