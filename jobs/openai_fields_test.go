package jobs_test

import (
	"strings"
	"testing"

	"github.com/batcherhq/batcher/jobs"
)

// TestOpenAILineFieldsNamed: a batch line's envelope field other than
// custom_id, method, url and body is refused by name, not dropped; a
// completions or embeddings body whose field has the wrong type or range
// names that field, not "must be a JSON object".
func TestOpenAILineFieldsNamed(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"custom_id":"a","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}]},"priority":"urgent"}`,
			"priority: not a field of a batch line"},
		{`{"custom_id":"b","url":"/v1/completions","body":{"prompt":"x","max_tokens":99999999999}}`,
			"body.max_tokens: must be an integer in range, got number"},
		{`{"custom_id":"c","url":"/v1/completions","body":{"prompt":"x","max_tokens":"5"}}`,
			"body.max_tokens: must be an integer in range, got string"},
		{`{"custom_id":"d","url":"/v1/embeddings","body":{"input":"x","model":7}}`,
			"body.model: must be a string, got number"},
		{`{"custom_id":"e","url":"/v1/completions","body":{"prompt":"x","temperature":"hot"}}`,
			"body.temperature: must be a number in range, got string"},
	} {
		_, _, err := jobs.ParseOpenAILine([]byte(tc.line))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.line, err, tc.want)
		}
	}
	// null is unset, as in a body.
	if _, _, err := jobs.ParseOpenAILine([]byte(`{"custom_id":"f","url":"/v1/completions","body":{"prompt":"x"},"extra":null}`)); err != nil {
		t.Errorf("a null envelope field: %v", err)
	}
}
