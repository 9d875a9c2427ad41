package openaiapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestFrontDoorNamesFieldsAsSent: a bad field deep in a chat request is
// named in the 400's param as the caller's JSON spelled it (OpenAI's
// names: a tool call's function.name, an image_url part, a json_schema's
// schema, max_completion_tokens when that set the cap, max_tokens when
// it contradicts max_completion_tokens), never in the core's spelling;
// streamed or not.
func TestFrontDoorNamesFieldsAsSent(t *testing.T) {
	e := newEnv(t, newFake())
	user := `{"role":"user","content":"hi"}`
	long := strings.Repeat("d", 64<<10+1)
	for _, tt := range []struct {
		name, body, param string
	}{
		{"tool call without id", `"messages":[` + user + `,{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]`,
			"messages[1].tool_calls[0].id"},
		{"tool call bad name", `"messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"a b","arguments":"{}"}}]}]`,
			"messages[1].tool_calls[0].function.name"},
		{"tool_call_id on a user message", `"messages":[{"role":"user","content":"hi","tool_call_id":"c1"}]`, "messages[0].tool_call_id"},
		{"image part with a bad url", `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x"}}]}]`,
			"messages[0].content[0].image_url.url"},
		{"tool bad name", `"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"a b"}}]`, "tools[0].function.name"},
		{"tool description too long", `"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","description":"` + long + `"}}]`,
			"tools[0].function.description"},
		{"tool_choice names no tool", `"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`,
			"tool_choice.function.name"},
		{"json_schema without a schema", `"messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"name":"s"}}`,
			"response_format.json_schema.schema"},
		{"max_tokens over the limit", `"messages":[` + user + `],"max_tokens":100000000`, "max_tokens"},
		{"max_completion_tokens over the limit", `"messages":[` + user + `],"max_completion_tokens":100000000`, "max_completion_tokens"},
		{"max_tokens and max_completion_tokens differ", `"messages":[` + user + `],"max_tokens":5,"max_completion_tokens":7`, "max_tokens"},
	} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"chat",` + tt.body + `}`
			if stream {
				body = `{"model":"chat","stream":true,` + tt.body + `}`
			}
			code, _, out := e.post(t, "/chat/completions", body)
			var got struct {
				Error struct {
					Param   string `json:"param"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil || code != http.StatusBadRequest || got.Error.Param != tt.param {
				t.Errorf("%s (stream %v): %d param %q (%s); want 400 param %q", tt.name, stream, code, got.Error.Param, got.Error.Message, tt.param)
			}
		}
	}
	// The two names of the cap, given the same value, are one cap.
	if code, _, out := e.post(t, "/chat/completions", `{"model":"chat","messages":[`+user+`],"max_tokens":5,"max_completion_tokens":5}`); code != http.StatusOK {
		t.Errorf("max_tokens and max_completion_tokens both 5: %d %s, want 200", code, out)
	}
}
