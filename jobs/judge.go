package jobs

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/template"

	"github.com/batcherhq/batcher/batcher"
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

// JudgeRun is one run as a judge's template sees it.
type JudgeRun struct {
	Group  string
	Run    int
	Model  string
	Output string
	Error  string
}

// JudgeInput is what a judge's template receives.
type JudgeInput struct {
	// Input is the item's last message or its prompt.
	Input string
	Runs  []JudgeRun
}

func (r *run) judgePrompt(ctx context.Context, t *Task, ir *ItemRequest) (string, error) {
	from := t.Item * r.lay.k
	runs, err := r.m.cfg.Store.Tasks(ctx, r.id, from, t.Seq)
	if err != nil {
		return "", err
	}
	in := JudgeInput{Input: lastText(&ir.Input)}
	for i := range runs {
		rec, _ := DecodeRecord(runs[i].Result)
		in.Runs = append(in.Runs, JudgeRun{Group: r.job.GroupName(runs[i].Group), Run: runs[i].Run, Model: runs[i].Model,
			Output: rec.Text, Error: rec.ErrMessage})
	}
	var b strings.Builder
	if err := r.tmpl.Execute(&b, &in); err != nil {
		return "", fmt.Errorf("%w: judge template: %w", batcher.ErrInvalid, err)
	}
	return b.String(), nil
}

func lastText(in *batcher.Input) string {
	switch in.Op {
	case batcher.OpChat:
		if n := len(in.Messages); n > 0 {
			return in.Messages[n-1].Text()
		}
	case batcher.OpCompletion:
		return in.Prompt
	case batcher.OpEmbedding:
		return in.Text
	}
	return ""
}
