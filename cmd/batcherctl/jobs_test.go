package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"
)

func jobLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-chat","messages":[{"role":"user","content":"item %d"}],"max_tokens":8}}`+"\n", i, i)
	}
	return b.String()
}

func TestJobsCreateWatchResultsCancelList(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	addr := startBatcherd(t, slowConfig, "--data-dir", t.TempDir())
	in := writeFile(t, "in.jsonl", jobLines(5))

	// No job yet: the list says so on stderr, and prints nothing.
	if r := ctl(t, addr, "", "jobs", "list"); r.code != 0 || r.stdout != "" || r.stderr != "no jobs\n" {
		t.Fatalf("list of none: %+v, want \"no jobs\" on stderr", r)
	}
	r := ctl(t, addr, "", "jobs", "create", in, "-m", "sim-chat", "--name", "small")
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	if id == "" {
		t.Fatalf("create printed no id: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "watch", id)
	if r.code != 0 || !strings.Contains(r.stdout, "completed 5/5 done, 5 succeeded") ||
		!regexp.MustCompile(`completed 5/5 done, 5 succeeded, 0 failed; [0-9.]+ items/s, \d+ tokens/s, eta 0s`).MatchString(r.stdout) {
		t.Fatalf("watch: %+v; want the rate, tokens/s and ETA on each line", r)
	}

	out := filepath.Join(t.TempDir(), "results.jsonl")
	// -o is the format, as in the other commands; -o FILE, which once
	// named the file, is refused naming --out, and writes nothing.
	if r = ctl(t, addr, "", "jobs", "results", id, "-o", out); r.code != exitUsage || !strings.Contains(r.stderr, "--out "+out) || r.stdout != "" {
		t.Fatalf("results -o FILE: %+v, want a usage error naming --out", r)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("results -o FILE made the file: %v", err)
	}
	if r = ctl(t, addr, "", "jobs", "results", id, "--out", out, "-o", "json"); r.code != 0 {
		t.Fatalf("results: %+v", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var res struct {
			Item     *string `json:"item"`
			CustomID string  `json:"customId"`
			Outcome  string  `json:"outcome"`
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		if res.Item == nil || "req-"+*res.Item != res.CustomID { // item 0 included
			t.Errorf("result line %q: its item is not its input's index", line)
		}
		seen[res.CustomID] = true
	}
	if len(seen) != 5 || !seen["req-0"] || !seen["req-4"] {
		t.Fatalf("results %s: want req-0..req-4", b)
	}
	if r2 := ctl(t, addr, "", "jobs", "results", id); r2.stdout != string(b) {
		t.Fatalf("results to stdout differ from the file:\n%s\nvs\n%s", r2.stdout, b)
	}
	// An existing file is not overwritten without --force, as with run.
	if r = ctl(t, addr, "", "jobs", "results", id, "-f", out); r.code != 2 || !strings.Contains(r.stderr, "exists: pass --force") {
		t.Fatalf("results over an existing file: %+v, want exit 2 naming --force", r)
	}
	if err := os.WriteFile(out, []byte("old and longer than any line of results would ever be\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = ctl(t, addr, "", "jobs", "results", id, "--out", out, "--force"); r.code != 0 {
		t.Fatalf("results --force: %+v", r)
	}
	if b2, _ := os.ReadFile(out); string(b2) != string(b) {
		t.Fatalf("results --force left %q, want the results alone", b2)
	}

	// A big job, cancelled at once.
	r = ctl(t, addr, jobLines(2000), "jobs", "create", "-", "-m", "sim-chat", "--name", "big")
	if r.code != 0 {
		t.Fatalf("create big: %+v", r)
	}
	big := strings.TrimSpace(r.stdout)
	if r = ctl(t, addr, "", "jobs", "cancel", big); r.code != 0 || !strings.HasPrefix(r.stdout, big+" ") {
		t.Fatalf("cancel: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "watch", big)
	if r.code != exitFailed || !strings.Contains(r.stdout, "cancelled") {
		t.Fatalf("watch of a cancelled job: %+v", r)
	}

	// Cancelling an ended job says so and fails, the job left as it was.
	for _, e := range [][2]string{{id, "completed"}, {big, "cancelled"}} {
		r = ctl(t, addr, "", "jobs", "cancel", e[0])
		if r.code != exitFailed || r.stdout != "" || !strings.Contains(r.stderr, "the job had already ended, "+e[1]+": nothing to cancel") {
			t.Fatalf("cancel of a %s job: %+v", e[1], r)
		}
	}

	r = ctl(t, addr, "", "jobs", "list")
	if r.code != 0 || !strings.Contains(r.stdout, id+"\tsmall\tcompleted") || !strings.Contains(r.stdout, big+"\tbig\tcancelled") {
		t.Fatalf("list: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "list", "-o", "json")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, `"failed":"0"`) {
		t.Fatalf("list -o json: %+v; want two lines with the zero counts", r)
	}

	r = ctl(t, addr, "", "jobs", "get", id)
	if r.code != 0 || !strings.Contains(r.stdout, "id\t"+id+"\n") || !strings.Contains(r.stdout, "state\tcompleted\n") ||
		!strings.Contains(r.stdout, "items\t5/5 done, 5 succeeded") || !strings.Contains(r.stdout, "items/s") ||
		!strings.Contains(r.stdout, "output\tjobs/"+id+" (under the service's data_dir)\n") {
		t.Fatalf("get: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "get", id, "-o", "json")
	var got struct{ ID string }
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.ID != id {
		t.Fatalf("get -o json: %+v (%v)", r, err)
	}
	if r = ctl(t, addr, "", "jobs", "delete", big); r.code != 0 || r.stdout != "" {
		t.Fatalf("delete: %+v", r)
	}
	if r = ctl(t, addr, "", "jobs", "get", big); r.code != exitFailed || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("get after delete: %+v; want exit 1 with NOT_FOUND", r)
	}
	if r = ctl(t, addr, "", "jobs", "delete", big); r.code != exitFailed || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Fatalf("delete twice: %+v; want exit 1 with NOT_FOUND", r)
	}
}

func TestStatsOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	addr := startBatcherd(t, fastConfig)
	r := ctl(t, addr, "", "stats", "--once")
	if r.code != 0 || !strings.Contains(r.stdout, "BACKENDS\n  sim\t") {
		t.Fatalf("stats --once: %+v", r)
	}
	r = ctl(t, addr, "", "stats", "--once", "-o", "json")
	var snap struct {
		Backends []struct{ Name string } `json:"backends"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &snap); r.code != 0 || err != nil || len(snap.Backends) != 1 || snap.Backends[0].Name != "sim" {
		t.Fatalf("stats --once -o json: %+v (%v)", r, err)
	}
}

// On a terminal, jobs watch draws a bar that ends complete.
func TestJobsWatchBarOnTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	for _, tc := range []struct {
		name       string
		rows, cols uint16
		want       string
	}{
		{"160x24", 24, 160, `job +200/200 \[=+\] +100 % completed [0-9.]+ items/s, \d+ tokens/s, eta 0s`},
		// A terminal that reports no size gets plain lines, not nothing.
		{"zero-sized", 0, 0, `completed 200/200 done, 200 succeeded, 0 failed; [0-9.]+ items/s`},
	} {
		t.Run(tc.name, func(t *testing.T) { watchOnTerminal(t, tc.rows, tc.cols, tc.want) })
	}
}

func watchOnTerminal(t *testing.T, rows, cols uint16, want string) {
	addr := startBatcherd(t, fastConfig, "--data-dir", t.TempDir())
	r := ctl(t, addr, jobLines(200), "jobs", "create", "-", "-m", "sim-chat")
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	_, bin := binaries(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer func() { _ = ptmx.Close() }()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--addr", addr, "jobs", "watch", id)
	cmd.Env = append(cleanEnv(), "TERM=xterm")
	cmd.Stdout, cmd.Stderr = tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, ptmx)
	}()
	err = cmd.Wait()
	<-read
	if err != nil {
		t.Fatalf("jobs watch on a terminal: %v\n%q", err, screen.String())
	}
	if !regexp.MustCompile(want).MatchString(screen.String()) {
		t.Errorf("no %s:\n%q", want, screen.String())
	}
}

// jobs create takes run groups and a judge, and refuses batcherctl run's
// format saying why.
func TestJobsCreateGroupsAndJudge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	addr := startBatcherd(t, fastConfig, "--data-dir", t.TempDir())
	tmpl := writeFile(t, "judge.tmpl", "Which is best for {{.Input}}? {{range .Runs}}[{{.Output}}]{{end}}")
	r := ctl(t, addr, jobLines(3), "jobs", "create", "-", "--group", "name=cold,model=sim-chat,runs=2,temperature=0.2",
		"--group", "name=hot,temperature=1,next-model=sim-chat,delay=10ms,retries=1,backoff=2",
		"--judge-model", "sim-chat", "--judge-template", "@"+tmpl, "--rpm", "6000")
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	if r = ctl(t, addr, "", "jobs", "watch", id); r.code != 0 {
		t.Fatalf("watch: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "get", id, "-o", "json")
	var job struct {
		Spec struct {
			RunGroups []struct {
				Name          string
				Runs          int
				NextModel     string
				BackoffFactor float64
			}
			Judge             struct{ Model, PromptTemplate string }
			RequestsPerMinute int
		}
		Progress struct {
			Counts struct{ Total, Succeeded string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &job); err != nil || r.code != 0 {
		t.Fatalf("get: %+v (%v)", r, err)
	}
	s := job.Spec
	if len(s.RunGroups) != 2 || s.RunGroups[0].Runs != 2 || s.RunGroups[1].NextModel != "sim-chat" || s.RunGroups[1].BackoffFactor != 2 ||
		s.Judge.Model != "sim-chat" || !strings.HasPrefix(s.Judge.PromptTemplate, "Which is best") || s.RequestsPerMinute != 6000 {
		t.Fatalf("spec %+v", s)
	}
	// 3 lines: 2 cold runs, 1 hot run and a judge each.
	if c := job.Progress.Counts; c.Total != "12" || c.Succeeded != "12" {
		t.Fatalf("counts %+v, want 12 of 12", c)
	}

	runLine := `{"id":"q1","model":"sim-chat","chat":{"messages":[{"role":"user","content":"Hi"}]}}` + "\n"
	r = ctl(t, addr, "\n"+runLine, "jobs", "create", "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "- line 2: this is a batcherctl run request") || !strings.Contains(r.stderr, "custom_id") {
		t.Fatalf("run format: %+v; want exit 2 saying why", r)
	}
	r = ctl(t, addr, jobLines(1), "jobs", "create", "-", "--group", "model=x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "name: must be set") {
		t.Fatalf("bad --group: %+v", r)
	}
}
