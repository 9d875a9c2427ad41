// Package fieldname spells the core's field paths as each door's callers
// spell them.
//
// The core names a bad field of a request (batcher.ValidationError.Field)
// once, in its own spelling: "input.chat.messages[2].tool_calls[0].name",
// "params.max_tokens", "tools[1].parameters". A caller never wrote that
// path: a gRPC caller set Request.chat.messages[2].tool_calls[0].name (the
// proto's field names; the oneof "input" is no field of its path), an
// OpenAI caller set messages[2].tool_calls[0].function.name in its JSON
// body. Every door (server/ for Submit, SubmitStream, SubmitStreamed and
// CreateJob's items; openaiapi/ for the front door; jobs/ for the result
// lines of OpenAI batch lines) names the field through this package, so
// that the same mistake is named the same way at every door of one kind.
package fieldname

import "strings"

// Proto spells a core field path as a path into batcher.v1.Request: the
// input's oneof name goes ("input.chat.messages[0]" is
// "chat.messages[0]"); every other core name is the proto field's. A bare
// "input" (the input is missing, or of the wrong kind) stays: it names
// the oneof.
func Proto(field string) string {
	if rest, ok := strings.CutPrefix(field, "input."); ok {
		return rest
	}
	return field
}

// OpenAI spells a core field path as a path into an OpenAI request body
// (/v1/chat/completions, /v1/completions, /v1/embeddings): messages'
// parts are content parts and images image_url parts, a tool's and a tool
// call's function fields sit under "function", a JSON schema's under
// "response_format.json_schema", the parameters at the top level and
// extra body fields by their own names. input is the body's name of the
// input field ("messages", "prompt" or "input", perhaps indexed);
// maxTokens the field that set the answer's token cap ("max_tokens" or
// "max_completion_tokens"; empty: "max_tokens").
func OpenAI(field, input, maxTokens string) string {
	switch {
	case strings.HasPrefix(field, "input.chat.messages"):
		return message("messages" + strings.TrimPrefix(field, "input.chat.messages"))
	case strings.HasPrefix(field, "extra_body."):
		return strings.TrimPrefix(field, "extra_body.") // an unknown top-level field, forwarded
	case strings.HasPrefix(field, "tools["):
		return toolReplacer.Replace(field)
	case field == "tool_choice.function":
		return "tool_choice.function.name"
	case field == "response_format.schema", field == "response_format.name",
		field == "response_format.description", field == "response_format.strict":
		return "response_format.json_schema." + strings.TrimPrefix(field, "response_format.")
	case field == "input.completion.prompt", field == "input.embedding.text", field == "input":
		return input
	case field == "params.max_tokens" && maxTokens != "":
		return maxTokens
	case strings.HasPrefix(field, "params."):
		return strings.TrimPrefix(field, "params.")
	}
	return field
}

// message turns the core's names inside a message's path into OpenAI's:
// parts are content parts, an image part's image is its image_url, and a
// tool call's name and arguments are its function's (a message's own name
// is "name" in both).
func message(p string) string {
	p = partReplacer.Replace(p)
	if i := strings.Index(p, ".tool_calls["); i >= 0 {
		if j := strings.IndexByte(p[i:], ']'); j >= 0 {
			switch k := i + j + 1; p[k:] {
			case ".name", ".arguments":
				return p[:k] + ".function" + p[k:]
			}
		}
	}
	return p
}

var partReplacer = strings.NewReplacer(".parts[", ".content[",
	".image.url", ".image_url.url", ".image.detail", ".image_url.detail", "].image", "].image_url")

// toolReplacer turns the core's names of a tool's fields into OpenAI's,
// under "function".
var toolReplacer = strings.NewReplacer(
	"].name", "].function.name", "].parameters", "].function.parameters",
	"].description", "].function.description", "].strict", "].function.strict",
)
