package llmsim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A json_schema response format whose schema is not a valid JSON Schema
// is refused as OpenAI refuses it, 400 naming the field; a valid one is
// answered with an instance of it.
func TestResponseFormatSchemaChecked(t *testing.T) {
	_, url := start(t, Config{})
	withSchema := func(schema string) msg {
		b := chatBody("sim-chat", 0, "user", "describe a person")
		b["response_format"] = msg{"type": "json_schema", "json_schema": msg{"name": "person", "strict": true, "schema": json.RawMessage(schema)}}
		return b
	}
	for _, bad := range []string{`{"type":"nonsense"}`, `{"type":"object","properties":{"age":{"minimum":"ten"}}}`, `[1]`} {
		resp, b := post(t, url+"/v1/chat/completions", withSchema(bad))
		e := decode[errorBody](t, b)
		if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "response_format.json_schema.schema" ||
			!strings.HasPrefix(e.Error.Message, `Invalid schema for response_format "person": `) || e.Error.Type != "invalid_request_error" {
			t.Errorf("schema %s: %d %s, want 400 naming response_format.json_schema.schema", bad, resp.StatusCode, b)
		}
	}
	resp, b := post(t, url+"/v1/chat/completions", withSchema(`{"type":"object","properties":{"age":{"type":"integer"}},"required":["age"],"additionalProperties":false}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a valid schema: %d %s", resp.StatusCode, b)
	}
	var age struct{ Age *int }
	if c := decode[chatResponse](t, b).Choices; len(c) != 1 || json.Unmarshal([]byte(c[0].Message.Content), &age) != nil || age.Age == nil {
		t.Errorf("a valid schema's answer is not an instance of it: %s", b)
	}
}
