package jobs

import (
	"errors"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

// TestSpelled: a bad field is named as each job door's caller wrote it.
func TestSpelled(t *testing.T) {
	ve := func(f string) error { return &batcher.ValidationError{Field: f, Reason: "bad"} }
	for _, tt := range []struct {
		err  error
		url  string
		want string
	}{
		{ve("input.chat.messages[1].tool_calls[0].name"), "", "request.chat.messages[1].tool_calls[0].name: bad"},
		{ve("input.chat.messages[1].tool_calls[0].name"), URLChat, "body.messages[1].tool_calls[0].function.name: bad"},
		{ve("params.presence_penalty"), "", "request.params.presence_penalty: bad"},
		{ve("params.presence_penalty"), URLChat, "body.presence_penalty: bad"},
		{ve("input.completion.prompt"), URLCompletions, "body.prompt: bad"},
		{ve("input.embedding.text"), URLEmbeddings, "body.input: bad"},
		{ve("tools[0].parameters"), URLChat, "body.tools[0].function.parameters: bad"},
		{errors.New("upstream failed"), URLChat, "upstream failed"},
	} {
		if got := spelled(tt.err, tt.url); got != tt.want {
			t.Errorf("spelled(%v, %q) = %q, want %q", tt.err, tt.url, got, tt.want)
		}
	}
}
