package jobs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/jobs"
)

// A judge's template is refused at creation when it cannot run on the
// items, not accepted to fail every judge task afterwards.
func TestJudgeTemplateCheckedAtCreation(t *testing.T) {
	e := newEnv(t, nil)
	two := []jobs.Group{{Name: "a", Runs: 2}}
	for _, tc := range []struct {
		name    string
		groups  []jobs.Group
		tmpl    string
		wantErr string // "": accepted
	}{
		{name: "good", tmpl: "Q: {{.Input}}{{range .Runs}} [{{.Group}}/{{.Run}}: {{.Output}}{{.Error}}]{{end}}"},
		{name: "second run of two", groups: two, tmpl: "{{(index .Runs 1).Output}}"},
		{name: "empty", tmpl: "", wantErr: "spec.judge.prompt_template: must be set"},
		{name: "does not parse", tmpl: "{{", wantErr: "spec.judge.prompt_template: must be a Go template"},
		{name: "unknown field", tmpl: "x {{.Nope}}", wantErr: "can't evaluate field Nope"},
		{name: "unknown field of a run", tmpl: "{{range .Runs}}{{.Score}}{{end}}", wantErr: "can't evaluate field Score"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.m.Begin(t.Context(), jobs.Spec{Model: "chat", Groups: tc.groups, Judge: &jobs.Judge{Model: "chat", PromptTemplate: tc.tmpl}})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				c.Abort()
				return
			}
			if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tc.wantErr)
			}
		})
	}
}
