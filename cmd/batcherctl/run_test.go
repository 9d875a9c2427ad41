package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherctl/internal/runfile"
)

// requestsFile returns n request lines for sim-chat: line i asks "p<i>" with
// id "q<i>", except where bad says what to write instead.
func requestsFile(n int, bad map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := bad[i]; ok {
			b.WriteString(s + "\n")
			continue
		}
		fmt.Fprintf(&b, `{"id":"q%d","model":"sim-chat","chat":{"messages":[{"role":"user","content":"p%d"}]}}`+"\n", i, i)
	}
	return b.String()
}

// readResults reads a results file: every line must be a complete result.
func readResults(t *testing.T, path string) []runfile.Result {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s ends mid-line: %q", path, b[max(0, len(b)-80):])
	}
	var rs []runfile.Result
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 && len(b) == 0 {
			break
		}
		var r runfile.Result
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%s line %d is not a result: %v: %q", path, i+1, err, line)
		}
		rs = append(rs, r)
	}
	return rs
}

// wantPrefix checks that rs are the results of input lines 1..len(rs) in
// order, blank lines aside, each with the expected id.
func wantPrefix(t *testing.T, rs []runfile.Result, blank map[int]bool) {
	t.Helper()
	line := 0
	for i, r := range rs {
		line++
		for blank[line] {
			line++
		}
		if r.Line != line {
			t.Fatalf("result %d is line %d, want line %d: the results are not a prefix of the input in order", i, r.Line, line)
		}
	}
}

func TestRunGoodAndBadLines(t *testing.T) {
	addr := startBatcherd(t, fastConfig)
	bad := map[int]string{
		5:   `{"model":"sim-chat","chat":`, // cut short
		77:  `{"model":"no-such-model","chat":{"messages":[{"role":"user","content":"x"}]}}`,
		100: ``, // blank: no result
		150: `{"model":"sim-chat","chat":{"messages":[{"role":"user","content":"no id"}]}}`,
		151: `{"model":"sim-chat","chat":{"messages":[{"role":"user","content":"x"}]},"params":{"maxTokens":-1}}`,
	}
	const n = 700
	in := writeFile(t, "in.jsonl", requestsFile(n, bad))
	out := filepath.Join(t.TempDir(), "out.jsonl")

	r := ctl(t, addr, "", "run", in, "--out", out, "--summary", "json")
	if r.code != exitFailed || !strings.Contains(r.stderr, "3 of 699 requests failed: see the error lines in "+out) {
		t.Errorf("exit %d, stderr %s; want 1 and 3 failures named", r.code, r.stderr)
	}
	var sum runSummary
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum.Written != n-1 || sum.Failed != 3 || sum.Read != n-1 || sum.Tokens == 0 {
		t.Errorf("--summary json: %q: %+v %v", r.stdout, sum, err)
	}
	// Not a terminal: plain progress lines, no bar, no escape codes.
	if !strings.Contains(r.stderr, "batcherctl run: 699/699 (100.0%) done, 3 failed") || strings.Contains(r.stderr, "\x1b[") {
		t.Errorf("stderr is not plain progress:\n%s", r.stderr)
	}

	rs := readResults(t, out)
	if len(rs) != n-1 {
		t.Fatalf("%d results, want %d", len(rs), n-1)
	}
	wantPrefix(t, rs, map[int]bool{100: true})
	for _, r := range rs {
		switch r.Line {
		case 5:
			if r.ID != "line-5" || r.Error == nil || r.Error.Code != "INVALID_ARGUMENT" || !strings.HasPrefix(r.Error.Message, "line 5: ") {
				t.Errorf("malformed line: %+v %+v", r, r.Error)
			}
		case 77:
			if r.Error == nil || !strings.Contains(r.Error.Message, `unknown model "no-such-model"`) || r.Completion != nil {
				t.Errorf("unknown model: %+v %+v", r, r.Error)
			}
		case 151:
			if r.Error == nil || r.Error.Code != "INVALID_ARGUMENT" || !strings.Contains(r.Error.Message, "max_tokens") {
				t.Errorf("bad field: %+v %+v", r, r.Error)
			}
		case 150:
			if r.ID != "line-150" || r.Error != nil || !strings.Contains(string(r.Completion), `"text":"no id`) {
				t.Errorf("line without id: %+v", r)
			}
		default:
			want := fmt.Sprintf(`"text":"p%d `, r.Line)
			if r.ID != "q"+strconv.Itoa(r.Line) || r.Error != nil || !strings.Contains(string(r.Completion), want) {
				t.Errorf("line %d: %+v; want id q%d and a completion with %s", r.Line, r, r.Line, want)
			}
		}
	}

	// An existing results file is not overwritten by accident.
	r = ctl(t, addr, "", "run", in, "--out", out)
	if r.code != exitUsage || !strings.Contains(r.stderr, "exists: pass --resume") {
		t.Errorf("rerun onto the results: %+v", r)
	}
}

func TestRunStdinToStdout(t *testing.T) {
	addr := startBatcherd(t, fastConfig)
	in := `{"chat":{"messages":[{"role":"user","content":"a"}]}}` + "\n" + `{"id":"b","chat":{"messages":[{"role":"user","content":"b"}]}}`
	r := ctl(t, addr, in, "run", "-", "--model", "sim-chat", "--progress", "none")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"line":1,"id":"line-1","completion":`) || !strings.HasPrefix(lines[1], `{"line":2,"id":"b","completion":`) {
		t.Errorf("stdout %q", r.stdout)
	}
	// One line: "1 result", not "1 results".
	r = ctl(t, addr, `{"chat":{"messages":[{"role":"user","content":"a"}]}}`+"\n", "run", "-", "--model", "sim-chat", "--progress", "none")
	if r.code != 0 || !strings.Contains(r.stderr, "batcherctl run: 1 result written (0 failed)") {
		t.Errorf("one request: %+v, want \"1 result written\"", r)
	}
	// -o FILE, run's old spelling of --out, still writes the results
	// there, and says to use --out: -o is a format everywhere else.
	out := filepath.Join(t.TempDir(), "old.jsonl")
	r = ctl(t, addr, `{"chat":{"messages":[{"role":"user","content":"a"}]}}`+"\n", "run", "-", "--model", "sim-chat", "--progress", "none", "-o", out)
	if b, err := os.ReadFile(out); r.code != 0 || err != nil || !strings.HasPrefix(string(b), `{"line":1,`) || !strings.Contains(r.stderr, "-o/--output is the old name of the results file: use --out (-f)") {
		t.Errorf("run -o FILE: %+v, file %q (%v); want the results there and a note naming --out", r, b, err)
	}
}

func TestRunResume(t *testing.T) {
	addr := startBatcherd(t, fastConfig)
	const n = 300
	in := writeFile(t, "in.jsonl", requestsFile(n, map[int]string{9: "junk"}))
	full := filepath.Join(t.TempDir(), "full.jsonl")
	if r := ctl(t, addr, "", "run", in, "--out", full, "--progress", "none"); r.code != exitFailed {
		t.Fatalf("full run: %+v", r)
	}
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	// A crash after 120 lines and half of the 121st.
	cut := 0
	for range 120 {
		cut += bytes.IndexByte(b[cut:], '\n') + 1
	}
	cut += 40
	part := writeFile(t, "part.jsonl", string(b[:cut]))

	// The junk line 9 was among the 120: it is sent again, and fails again.
	r := ctl(t, addr, "", "run", in, "--out", part, "--resume", "--summary", "json")
	var sum runSummary
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != exitFailed || sum.Skipped != 119 || sum.Retried != 1 || sum.Written != n-119 || sum.Failed != 1 {
		t.Fatalf("resume: %+v, summary %+v: want 119 skipped, the junk line retried, the rest written", r, sum)
	}
	if !strings.Contains(r.stderr, "1 of 181 requests failed (1 had failed before and were retried)") {
		t.Errorf("stderr %q does not say how many failed", r.stderr)
	}
	got, want := readResults(t, part), readResults(t, full)
	if len(got) != len(want) {
		t.Fatalf("resumed file has %d results, want %d", len(got), len(want))
	}
	sortByLine(got)
	for i := range got {
		if got[i].Line != want[i].Line || got[i].ID != want[i].ID || (got[i].Error == nil) != (want[i].Error == nil) {
			t.Fatalf("result %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// Nothing left but the junk line: a second resume sends it alone.
	r = ctl(t, addr, "", "run", in, "--out", part, "--resume", "--summary", "json")
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != exitFailed || sum.Written != 1 || sum.Failed != 1 || sum.Skipped != n-1 {
		t.Errorf("second resume: %+v %+v", r, sum)
	}
}

// A resumed run sends again the requests that had failed (here a line
// that met a model that was down), drops their old error lines, and exits
// 0 once the whole file succeeded.
func TestRunResumeRetriesFailed(t *testing.T) {
	addr := startBatcherd(t, fastConfig)
	const n = 50
	in := writeFile(t, "in.jsonl", requestsFile(n, nil))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	if r := ctl(t, addr, "", "run", in, "--out", out, "--progress", "none"); r.code != 0 {
		t.Fatalf("first run: %+v", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[6] = `{"line":7,"id":"q7","error":{"code":"UNAVAILABLE","message":"the model is down"}}` + "\n"
	lines[30] = `{"line":31,"id":"q31","completion":{"text":"half"},"error":{"code":"DEADLINE_EXCEEDED","message":"late"}}` + "\n"
	if err := os.WriteFile(out, []byte(strings.Join(lines[:40], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o600); err != nil {
		t.Fatal(err)
	}

	r := ctl(t, addr, "", "run", in, "--out", out, "--resume", "--progress", "none")
	if r.code != 0 || !strings.Contains(r.stderr, "12 results written (0 failed)") || !strings.Contains(r.stderr, "38 already done, skipped; 2 that had failed, sent again") {
		t.Fatalf("resume: %+v: want exit 0 with lines 7 and 31 sent again", r)
	}
	rs := readResults(t, out)
	if len(rs) != n {
		t.Fatalf("%d results, want %d: one per input line", len(rs), n)
	}
	sortByLine(rs)
	for i, res := range rs {
		if res.Line != i+1 || res.ID != fmt.Sprintf("q%d", i+1) || res.Error != nil {
			t.Fatalf("result %+v, want line %d succeeded", res, i+1)
		}
	}
	if mode := fileMode(t, out); mode != 0o600 {
		t.Errorf("the rewritten file's mode is %v, want the old file's 0600", mode)
	}
}

func sortByLine(rs []runfile.Result) {
	slices.SortFunc(rs, func(a, b runfile.Result) int { return a.Line - b.Line })
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

var progressLine = regexp.MustCompile(`^batcherctl run: (\d+)/`)

// Ctrl-C mid-run: batcherctl stops reading, waits for the requests in
// flight, writes them, and exits 130 with a consistent file that --resume
// finishes.
func TestRunInterrupt(t *testing.T) {
	addr := startBatcherd(t, slowConfig)
	_, bin := binaries(t)
	const n = 1000
	in := writeFile(t, "in.jsonl", requestsFile(n, nil))
	out := filepath.Join(t.TempDir(), "out.jsonl")

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--addr", addr, "run", in, "--out", out, "--window", "32", "--progress", "plain", "--progress-interval", "20ms")
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once results are being written.
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	interrupted := false
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if m := progressLine.FindStringSubmatch(sc.Text()); !interrupted && m != nil && m[1] != "0" {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			interrupted = true
		}
	}
	err = cmd.Wait()
	if !interrupted {
		t.Fatalf("no progress seen:\n%s", log.String())
	}
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want %d:\n%s", err, exitInterrupted, log.String())
	}
	if !strings.Contains(log.String(), "requests in flight (their results are written); press Ctrl-C again to abort") || !strings.Contains(log.String(), "rerun with --resume") {
		t.Errorf("stderr does not say what happened:\n%s", log.String())
	}
	rs := readResults(t, out)
	if len(rs) == 0 || len(rs) >= n {
		t.Fatalf("%d results after the interrupt; want some, not all", len(rs))
	}
	wantPrefix(t, rs, nil)
	for _, r := range rs {
		if r.Error != nil {
			t.Fatalf("line %d failed: %+v (a request in flight must be waited for, not cut)", r.Line, r.Error)
		}
	}

	r := ctl(t, addr, "", "run", in, "--out", out, "--resume", "--progress", "none")
	if r.code != 0 {
		t.Fatalf("resume: %+v", r)
	}
	rs = readResults(t, out)
	if len(rs) != n {
		t.Fatalf("%d results after resuming, want %d", len(rs), n)
	}
	wantPrefix(t, rs, nil)
}
