package main

import (
	"strings"
	"testing"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

func TestParseGroup(t *testing.T) {
	g, err := parseGroup("name=hot, model=big,runs=3,temperature=0.5,next-model=small,delay=200ms,retries=2,retry-delay=1s,backoff=1.5")
	if err != nil {
		t.Fatal(err)
	}
	if g.GetName() != "hot" || g.GetModel() != "big" || g.GetRuns() != 3 || g.GetTemperature() != 0.5 || g.GetNextModel() != "small" ||
		g.GetDelay().AsDuration() != 200*time.Millisecond || g.GetMaxRetries() != 2 || g.GetRetryDelay().AsDuration() != time.Second ||
		g.GetBackoffFactor() != 1.5 {
		t.Fatalf("parsed %v", g)
	}
	for in, want := range map[string]string{
		"model=m":                   "name: must be set",
		"name=a,runs":               `"runs" is not key=value`,
		"name=a,runs=x":             `runs: must be a whole number, got "x"`,
		"name=a,runs=1.5":           `runs: must be a whole number, got "1.5"`,
		"name=a,retries=9999999999": `retries: must be a whole number in range, got "9999999999"`,
		"name=a,temperature=warm":   `temperature: must be a number, got "warm"`,
		"name=a,runs=0":             "runs: must be at least 1, got 0",
		"name=a,runs=-2":            "runs: must be at least 1, got -2",
		"name=a,delay=5":            "delay: time: missing unit",
		"name=a,colour=r":           `unknown key "colour"`,
		"name=a,backoff=q":          `backoff: must be a number, got "q"`,
	} {
		if _, err := parseGroup(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func FuzzParseGroup(f *testing.F) {
	for _, s := range []string{"name=a", "name=a,model=m,runs=3", "name=a,delay=1s,backoff=2", ",,=", "name=,runs=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := parseGroup(s)
		if err == nil && g.GetName() == "" {
			t.Fatalf("%q parsed without a name", s)
		}
	})
}

func TestBatchLineProblem(t *testing.T) {
	for line, bad := range map[string]bool{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`: false,
		`{"id":"q1","model":"sim-chat","chat":{"messages":[{"role":"user","content":"Hi"}]}}`:               true,
		`{"chat":{"messages":[{"role":"user","content":"Hi"}]}}`:                                            true,
		`not json`: false, // the service names the fault of each such line
		`{"x":1}`:  false,
	} {
		if got := batchLineProblem([]byte(line)) != ""; got != bad {
			t.Errorf("%s: problem %v, want %v", line, got, bad)
		}
	}
}

func TestCreateFlagsDispatch(t *testing.T) {
	for _, d := range []string{"online", "batch_api", "auto"} {
		spec, err := (&createFlags{dispatch: d}).spec(&batcherv1.JobSpec{})
		if err != nil || spec.GetDispatch() != d {
			t.Errorf("--dispatch %s: %v (%v)", d, spec.GetDispatch(), err)
		}
	}
	if _, err := (&createFlags{dispatch: "later"}).spec(&batcherv1.JobSpec{}); err == nil || !strings.Contains(err.Error(), "--dispatch") {
		t.Errorf("--dispatch later: %v, want an error naming --dispatch", err)
	}
}
