package fieldname

import "testing"

// TestProto: a row per kind of core path; the proto's own names pass.
func TestProto(t *testing.T) {
	for core, want := range map[string]string{
		"input.chat.messages":                       "chat.messages",
		"input.chat.messages[2].tool_calls[0].name": "chat.messages[2].tool_calls[0].name",
		"input.chat.messages[0].parts[1].image.url": "chat.messages[0].parts[1].image.url",
		"input.chat.messages[1].tool_call_id":       "chat.messages[1].tool_call_id",
		"input.completion.prompt":                   "completion.prompt",
		"input.embedding.text":                      "embedding.text",
		"input":                                     "input",
		"params.max_tokens":                         "params.max_tokens",
		"tools[3].parameters":                       "tools[3].parameters",
		"tool_choice.function":                      "tool_choice.function",
		"response_format.schema":                    "response_format.schema",
		"extra_body.service_tier":                   "extra_body.service_tier",
		"metadata[k]":                               "metadata[k]",
	} {
		if got := Proto(core); got != want {
			t.Errorf("Proto(%q) = %q, want %q", core, got, want)
		}
	}
}

// TestOpenAI: a row per kind of core path, spelled as an OpenAI body
// spells it.
func TestOpenAI(t *testing.T) {
	for _, tt := range []struct{ core, input, max, want string }{
		{"input.chat.messages", "messages", "", "messages"},
		{"input.chat.messages[1].role", "messages", "", "messages[1].role"},
		{"input.chat.messages[2].name", "messages", "", "messages[2].name"},
		{"input.chat.messages[2].tool_calls", "messages", "", "messages[2].tool_calls"},
		{"input.chat.messages[2].tool_calls[0].id", "messages", "", "messages[2].tool_calls[0].id"},
		{"input.chat.messages[2].tool_calls[0].name", "messages", "", "messages[2].tool_calls[0].function.name"},
		{"input.chat.messages[2].tool_calls[10].arguments", "messages", "", "messages[2].tool_calls[10].function.arguments"},
		{"input.chat.messages[1].tool_call_id", "messages", "", "messages[1].tool_call_id"},
		{"input.chat.messages[0].parts[1]", "messages", "", "messages[0].content[1]"},
		{"input.chat.messages[0].parts[1].image", "messages", "", "messages[0].content[1].image_url"},
		{"input.chat.messages[0].parts[1].image.url", "messages", "", "messages[0].content[1].image_url.url"},
		{"input.chat.messages[0].parts[1].image.detail", "messages", "", "messages[0].content[1].image_url.detail"},
		{"input.completion.prompt", "prompt[3]", "", "prompt[3]"},
		{"input.embedding.text", "input", "", "input"},
		{"input", "messages", "", "messages"},
		{"tools", "messages", "", "tools"},
		{"tools[1].name", "messages", "", "tools[1].function.name"},
		{"tools[1].parameters", "messages", "", "tools[1].function.parameters"},
		{"tools[1].description", "messages", "", "tools[1].function.description"},
		{"tool_choice", "messages", "", "tool_choice"},
		{"tool_choice.function", "messages", "", "tool_choice.function.name"},
		{"response_format.name", "messages", "", "response_format.json_schema.name"},
		{"response_format.schema", "messages", "", "response_format.json_schema.schema"},
		{"response_format.type", "messages", "", "response_format.type"},
		{"params.max_tokens", "messages", "", "max_tokens"},
		{"params.max_tokens", "messages", "max_completion_tokens", "max_completion_tokens"},
		{"params.logit_bias[50256]", "messages", "", "logit_bias[50256]"},
		{"params.n", "messages", "", "n"},
		{"extra_body.foo", "messages", "", "foo"},
		{"user", "messages", "", "user"},
	} {
		if got := OpenAI(tt.core, tt.input, tt.max); got != tt.want {
			t.Errorf("OpenAI(%q, %q, %q) = %q, want %q", tt.core, tt.input, tt.max, got, tt.want)
		}
	}
}
