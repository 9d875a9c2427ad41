package jobs

import (
	"fmt"
	"io"
	"text/template"
)

// maxJudgeSampleRuns bounds the runs of the sample a judge's template is
// tried on at creation.
const maxJudgeSampleRuns = 1000

// checkJudgeTemplate parses a judge's prompt template as the run does, and
// executes it once on a sample JudgeInput with as many runs as each item
// of s will have: a template that parses but names a field JudgeInput
// lacks ({{.Nope}}) would otherwise fail every judge task of the job.
func checkJudgeTemplate(s *Spec) error {
	text := s.Judge.PromptTemplate
	if text == "" {
		return fmt.Errorf("must be set")
	}
	tmpl, err := template.New("judge").Option("missingkey=zero").Parse(text)
	if err != nil {
		return fmt.Errorf("must be a Go template: %w", err)
	}
	runs := 0
	for _, g := range s.Groups {
		runs += max(g.Runs, 1)
	}
	in := JudgeInput{Input: "the item's input", Runs: make([]JudgeRun, min(max(runs, 1), maxJudgeSampleRuns))}
	for i := range in.Runs {
		in.Runs[i] = JudgeRun{Group: "group", Run: i, Model: "model", Output: "an answer"}
	}
	if err := tmpl.Execute(io.Discard, &in); err != nil {
		return fmt.Errorf("does not execute on a sample item (fields: .Input, .Runs[i].Group, .Run, .Model, .Output, .Error): %w", err)
	}
	return nil
}
