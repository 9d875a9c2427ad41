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

// TestToolSchemaCheckedAtEveryEndpoint: a schema that is not a valid JSON
// Schema is refused by the one check (Server.schemas.Check) wherever a
// request may carry one, naming the field: a response format's schema and
// a tool's parameters on /v1/chat/completions, a tool's input_schema on
// the Anthropic /v1/messages; the same request with a valid schema passes.
func TestToolSchemaCheckedAtEveryEndpoint(t *testing.T) {
	_, url := start(t, Config{})
	const good = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	openaiTool := func(schema string) msg {
		b := chatBody("sim-chat", 0, "user", "weather?")
		b["tools"] = []msg{{"type": "function", "function": msg{"name": "get_weather", "parameters": json.RawMessage(schema)}}}
		return b
	}
	anthropicTool := func(schema string) msg {
		return msg{"model": "sim-chat", "max_tokens": 16, "messages": []msg{{"role": "user", "content": "weather?"}},
			"tools": []msg{{"name": "get_weather", "input_schema": json.RawMessage(schema)}}}
	}
	for _, door := range []struct {
		name   string
		call   func(schema string) (*http.Response, []byte)
		refuse func(t *testing.T, resp *http.Response, b []byte)
	}{
		{"/v1/chat/completions response_format", func(schema string) (*http.Response, []byte) {
			b := chatBody("sim-chat", 0, "user", "describe")
			b["response_format"] = msg{"type": "json_schema", "json_schema": msg{"name": "person", "schema": json.RawMessage(schema)}}
			return post(t, url+"/v1/chat/completions", b)
		}, func(t *testing.T, resp *http.Response, b []byte) {
			e := decode[errorBody](t, b)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "response_format.json_schema.schema" {
				t.Errorf("%d %s, want 400 naming response_format.json_schema.schema", resp.StatusCode, b)
			}
		}},
		{"/v1/chat/completions tools", func(schema string) (*http.Response, []byte) {
			return post(t, url+"/v1/chat/completions", openaiTool(schema))
		}, func(t *testing.T, resp *http.Response, b []byte) {
			e := decode[errorBody](t, b)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "tools[0].function.parameters" ||
				!strings.HasPrefix(e.Error.Message, `Invalid schema for function "get_weather": not a valid JSON Schema`) || e.Error.Type != "invalid_request_error" {
				t.Errorf("%d %s, want 400 naming tools[0].function.parameters", resp.StatusCode, b)
			}
		}},
		{"/v1/messages tools", func(schema string) (*http.Response, []byte) {
			return messagesCall(t, url, anthropicTool(schema))
		}, func(t *testing.T, resp *http.Response, b []byte) {
			typ, m := anthropicErrorOf(t, b)
			if resp.StatusCode != http.StatusBadRequest || typ != "invalid_request_error" ||
				!strings.HasPrefix(m, "tools.0.custom.input_schema: JSON schema is invalid: ") {
				t.Errorf("%d %s, want 400 naming tools.0.custom.input_schema", resp.StatusCode, b)
			}
		}},
	} {
		t.Run(door.name, func(t *testing.T) {
			for _, bad := range []string{`{"type":"nonsense"}`, `{"type":"object","properties":{"city":{"minLength":"two"}}}`, `[1]`} {
				resp, b := door.call(bad)
				door.refuse(t, resp, b)
			}
			if resp, b := door.call(good); resp.StatusCode != http.StatusOK {
				t.Errorf("a valid schema: %d %s", resp.StatusCode, b)
			}
		})
	}
}
