package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// createFlags are jobs create's options beyond --name and --model.
type createFlags struct {
	specFile      string
	groups        []string
	judgeModel    string
	judgeTemplate string
	rpm           int32
	tpm           int64
	outputDir     string
	dispatch      string
}

// spec builds the job's spec: --spec's file first (protobuf JSON of
// JobSpec), then every flag that was set on top.
func (f *createFlags) spec(base *batcherv1.JobSpec) (*batcherv1.JobSpec, error) {
	spec := &batcherv1.JobSpec{}
	if f.specFile != "" {
		b, err := os.ReadFile(f.specFile)
		if err != nil {
			return nil, fmt.Errorf("--spec: %w", err)
		}
		if err := protojson.Unmarshal(b, spec); err != nil {
			return nil, usageError("--spec %s: not a JobSpec in protobuf JSON: %v", f.specFile, err)
		}
	}
	if base.GetName() != "" {
		spec.Name = base.GetName()
	}
	if base.GetModel() != "" {
		spec.Model = base.GetModel()
	}
	for _, g := range f.groups {
		rg, err := parseGroup(g)
		if err != nil {
			return nil, usageError("--group %q: %v", g, err)
		}
		spec.RunGroups = append(spec.RunGroups, rg)
	}
	if f.judgeModel != "" || f.judgeTemplate != "" {
		if f.judgeModel == "" || f.judgeTemplate == "" {
			return nil, usageError("--judge-model and --judge-template go together")
		}
		tmpl := f.judgeTemplate
		if name, ok := strings.CutPrefix(tmpl, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, fmt.Errorf("--judge-template: %w", err)
			}
			tmpl = string(b)
		}
		spec.Judge = &batcherv1.Judge{Model: f.judgeModel, PromptTemplate: tmpl}
	}
	if f.rpm != 0 {
		spec.RequestsPerMinute = f.rpm
	}
	if f.tpm != 0 {
		spec.TokensPerMinute = f.tpm
	}
	if f.outputDir != "" {
		spec.OutputDir = f.outputDir
	}
	switch f.dispatch {
	case "":
	case "online", "batch_api", "auto":
		spec.Dispatch = f.dispatch
	default:
		return nil, usageError("--dispatch: online, batch_api or auto, got %q", f.dispatch)
	}
	return spec, nil
}

// parseGroup reads a --group value: comma-separated key=value pairs, name
// required: name=a,model=m,runs=3,temperature=0.7,next-model=m2,
// delay=500ms,retries=2,retry-delay=1s,backoff=1.5.
func parseGroup(s string) (*batcherv1.RunGroup, error) {
	g := &batcherv1.RunGroup{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "name":
			g.Name = v
		case "model":
			g.Model = v
		case "next-model":
			g.NextModel = v
		case "runs":
			var n int64
			if n, err = strconv.ParseInt(v, 10, 32); err == nil && n < 1 {
				// The wire's 0 means "not set" (one run): a 0 written
				// here would silently become 1.
				err = fmt.Errorf("must be at least 1, got %d", n)
			}
			g.Runs = int32(n)
		case "temperature":
			var t float64
			if t, err = strconv.ParseFloat(v, 32); err == nil {
				t32 := float32(t)
				g.Temperature = &t32
			}
		case "retries":
			var n int64
			if n, err = strconv.ParseInt(v, 10, 32); err == nil {
				n32 := int32(n)
				g.MaxRetries = &n32
			}
		case "backoff":
			g.BackoffFactor, err = strconv.ParseFloat(v, 64)
		case "delay", "retry-delay":
			var d time.Duration
			if d, err = time.ParseDuration(v); err == nil {
				if k == "delay" {
					g.Delay = durationpb.New(d)
				} else {
					g.RetryDelay = durationpb.New(d)
				}
			}
		default:
			return nil, fmt.Errorf("unknown key %q (name, model, runs, temperature, next-model, delay, retries, retry-delay, backoff)", k)
		}
		if ne := (*strconv.NumError)(nil); errors.As(err, &ne) {
			// strconv's own words ("strconv.ParseInt: parsing ...") name
			// a Go function, not what the value should be.
			what := "a number"
			if k == "runs" || k == "retries" {
				what = "a whole number"
			}
			if errors.Is(ne.Err, strconv.ErrRange) {
				what += " in range"
			}
			err = fmt.Errorf("must be %s, got %q", what, v)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	if g.Name == "" {
		return nil, fmt.Errorf("name: must be set")
	}
	return g, nil
}

// checkBatchInput reads r's first non-blank line and fails, saying why,
// when it is not an OpenAI batch input line: above all when it is a line
// of batcherctl run's format (a batcher.v1.Request), which would otherwise
// make a job of invalid items. It returns a reader that still yields
// everything r held.
func checkBatchInput(name string, r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var seen bytes.Buffer
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		seen.Write(line)
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if msg := batchLineProblem(t); msg != "" {
				return nil, usageError("%s line %d: %s", name, lineNo, msg)
			}
			break
		}
		if err != nil {
			break // empty input: the service says so
		}
	}
	return io.MultiReader(&seen, br), nil
}

// batchLineProblem says why line is not an OpenAI batch input line, or ""
// when it looks like one (or is too broken to tell: the service names the
// fault of each such line).
func batchLineProblem(line []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(line, &fields) != nil {
		return ""
	}
	if _, ok := fields["custom_id"]; ok {
		return ""
	}
	if _, ok := fields["body"]; ok {
		return ""
	}
	for _, k := range []string{"chat", "completion", "embedding", "model", "id"} {
		if _, ok := fields[k]; ok {
			return "this is a batcherctl run request (batcher.v1.Request in protobuf JSON), not an OpenAI batch input line; " +
				`jobs create reads {"custom_id":"...","method":"POST","url":"/v1/chat/completions","body":{"model":"...","messages":[...]}} ` +
				"(use batcherctl run for this file)"
		}
	}
	return ""
}
