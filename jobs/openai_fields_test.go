package jobs_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// TestOpenAILineFieldsNamed: a batch line's envelope field other than
// custom_id, method, url and body is refused by name, not dropped; a
// completions or embeddings body whose field has the wrong type or range
// names that field, as the front door's decoder names it; a repeated key
// is refused by its path; max_tokens and max_completion_tokens are read by
// the front door's rule.
func TestOpenAILineFieldsNamed(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"custom_id":"a","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}]},"priority":"urgent"}`,
			"priority: not a field of a batch line"},
		{`{"custom_id":"b","url":"/v1/completions","body":{"prompt":"x","max_tokens":99999999999}}`,
			"body.max_tokens: must be 1 to 2147483647, got 99999999999"},
		{`{"custom_id":"b2","url":"/v1/completions","body":{"prompt":"x","max_tokens":1e20}}`,
			"body.max_tokens: max_tokens: want an integer in range, got number 1e20"},
		// The front door's rule on the cap's two names, as a chat line
		// and /v1/chat/completions apply it: neither dropped.
		{`{"custom_id":"b3","url":"/v1/completions","body":{"prompt":"x","max_tokens":5,"max_completion_tokens":7}}`,
			"body.max_tokens: is 5 and max_completion_tokens 7: set one"},
		{`{"custom_id":"b4","url":"/v1/completions","body":{"prompt":"x","max_tokens":0}}`,
			"body.max_tokens: must be at least 1, got 0"},
		{`{"custom_id":"b5","url":"/v1/completions","body":{"prompt":"x","max_completion_tokens":0}}`,
			"body.max_completion_tokens: must be at least 1, got 0"},
		// An embeddings line is read as /v1/embeddings reads a body,
		// which takes no cap.
		{`{"custom_id":"b6","url":"/v1/embeddings","body":{"input":"x","max_completion_tokens":4}}`,
			"body.max_completion_tokens: is not a parameter Batcher serves on /v1/embeddings"},
		{`{"custom_id":"c","url":"/v1/completions","body":{"prompt":"x","max_tokens":"5"}}`,
			"body.max_tokens: max_tokens: want an integer in range, got string"},
		{`{"custom_id":"d","url":"/v1/embeddings","body":{"input":"x","model":7}}`,
			"body.model: model: want a string, got number"},
		{`{"custom_id":"e","url":"/v1/completions","body":{"prompt":"x","temperature":"hot"}}`,
			"body.temperature: temperature: want a number, got string"},
	} {
		_, _, err := jobs.ParseOpenAILine([]byte(tc.line))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.line, err, tc.want)
		}
	}
	// A repeated key, which the decoder would read as its last value, is
	// refused by its path, in the envelope and in every kind of body.
	for _, tc := range []struct{ line, id, want string }{
		{`{"custom_id":"a","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x","content":"y"}]}}`,
			"a", "body.messages[0].content: given more than once"},
		{`{"custom_id":"b","url":"/v1/completions","body":{"prompt":"x","max_tokens":5,"max_tokens":50}}`,
			"b", "body.max_tokens: given more than once"},
		{`{"custom_id":"c","url":"/v1/embeddings","body":{"input":"x"},"body":{"input":"y"}}`,
			"c", "body: given more than once"},
		{`{"custom_id":"d","custom_id":"e","url":"/v1/embeddings","body":{"input":"x"}}`,
			"", "custom_id: given more than once"},
	} {
		id, _, err := jobs.ParseOpenAILine([]byte(tc.line))
		if err == nil || !strings.Contains(err.Error(), tc.want) || id != tc.id {
			t.Errorf("%s: custom_id %q, error %v; want %q and %q", tc.line, id, err, tc.id, tc.want)
		}
	}
	// null is unset, as in a body.
	if _, _, err := jobs.ParseOpenAILine([]byte(`{"custom_id":"f","url":"/v1/completions","body":{"prompt":"x"},"extra":null}`)); err != nil {
		t.Errorf("a null envelope field: %v", err)
	}
}

// TestRefusedLinesNameTheirLine: a line the core's rule refuses (a
// temperature out of range, checked when the job is created by the rule
// Submit applies) and one naming an unknown model name their line in their
// error lines; OpenAI's shape is kept (an error of code and message only).
func TestRefusedLinesNameTheirLine(t *testing.T) {
	e := newEnv(t, nil)
	j := e.create(t, jobs.Spec{Model: "chat"}, 1,
		`{"custom_id":"hot","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"temperature":5}}`,
		`{"custom_id":"nope","method":"POST","url":"/v1/chat/completions","body":{"model":"nope","messages":[{"role":"user","content":"x"}]}}`,
	)
	if p, _ := e.wait(t, j.ID); p.State != jobs.StateCompleted || p.Counts.Failed != 2 {
		t.Fatalf("job ended %s %+v, want completed with 2 failed", p.State, p.Counts)
	}
	want := map[string]string{
		"hot":  `line 2: model "chat": body.temperature: must be 0 to 2, got 5`,
		"nope": `line 3: model: unknown model "nope"`,
	}
	errs := readLines(t, filepath.Join(jobs.JobDir(e.dir, j.ID), jobs.ErrorsFile))
	if len(errs) != len(want) {
		t.Fatalf("%d error lines, want %d", len(errs), len(want))
	}
	for _, l := range errs {
		if l.Error == nil || l.Error.Code != jobs.CodeInvalidRequest || l.Error.Message != want[l.CustomID] || l.Response != nil {
			t.Errorf("error line %s: %+v, want invalid_request %q", l.CustomID, l.Error, want[l.CustomID])
		}
	}
}

// TestCreationChecksParamRanges: an item's parameter out of range is
// refused when the job is created, naming the line, the custom id, the
// field and its limit (fail_on_invalid: the creation's error), by the
// core's rule; so is a spec's default out of range, naming the spec's
// field, once; a spec's default applies to the items as it will when they
// run, so an item leaving max_tokens to a default within the model's
// limit passes.
func TestCreationChecksParamRanges(t *testing.T) {
	e := newEnv(t, nil)
	f := func(v float32) *float32 { return &v }
	line := func(id, body string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]` + body + `}}`
	}
	for _, tc := range []struct {
		name string
		spec jobs.Spec
		line string
		want string
	}{
		{"temperature", jobs.Spec{Model: "chat"}, line("t", `,"temperature":2.5`), `line 1 (custom_id "t"): model "chat": body.temperature: must be 0 to 2, got 2.5`},
		{"top_p", jobs.Spec{Model: "chat"}, line("p", `,"top_p":0`), `body.top_p: must be greater than 0 and at most 1, got 0`},
		{"max_tokens", jobs.Spec{Model: "chat"}, line("m", `,"max_tokens":99999`), `body.max_tokens: must be 1 to 32768, got 99999`},
		{"n", jobs.Spec{Model: "chat"}, line("n", `,"n":9`), `body.n: must be 1 to 8, got 9`},
		{"presence_penalty", jobs.Spec{Model: "chat"}, line("pp", `,"presence_penalty":-3`), `body.presence_penalty: must be -2 to 2, got -3`},
		{"stop", jobs.Spec{Model: "chat"}, line("s", `,"stop":["a","b","c","d","e"]`), `body.stop: must hold at most 4 sequences, got 5`},
		{"spec temperature", jobs.Spec{Model: "chat", Params: batcher.Params{Temperature: f(3)}}, line("ok", ""),
			"spec.params.temperature: must be 0 to 2, got 3"},
		{"spec max_tokens, no model", jobs.Spec{Params: batcher.Params{MaxTokens: 40000}}, line("ok", ""),
			"spec.params.max_tokens: must be 1 to 32768, got 40000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.FailOnInvalid = true
			c, err := e.m.Begin(t.Context(), tc.spec)
			if err == nil {
				if err = c.AddLine(t.Context(), []byte(tc.line)); err != nil {
					c.Abort()
				} else {
					t.Fatalf("line accepted: %+v", c.Job())
				}
			}
			if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}
