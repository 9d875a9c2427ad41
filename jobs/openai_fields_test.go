package jobs_test

import (
	"path/filepath"
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

// TestRefusedLinesNameTheirLine: a line the core refuses when it runs (a
// temperature out of range, which creation does not check) names its line
// in its error line, as a line refused at creation does; OpenAI's shape
// is kept (an error of code and message only).
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
		"hot":  "line 2: body.temperature: must be 0 to 2, got 5",
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
