package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	r := ctl(t, addr, "", "jobs", "create", in, "-m", "sim-chat", "--name", "small")
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	if id == "" {
		t.Fatalf("create printed no id: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "watch", id)
	if r.code != 0 || !strings.Contains(r.stdout, "completed 5/5 done, 5 succeeded") {
		t.Fatalf("watch: %+v", r)
	}

	out := filepath.Join(t.TempDir(), "results.jsonl")
	if r = ctl(t, addr, "", "jobs", "results", id, "-o", out); r.code != 0 {
		t.Fatalf("results: %+v", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var res struct {
			CustomID string `json:"customId"`
			Outcome  string `json:"outcome"`
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		seen[res.CustomID] = true
	}
	if len(seen) != 5 || !seen["req-0"] || !seen["req-4"] {
		t.Fatalf("results %s: want req-0..req-4", b)
	}
	if r2 := ctl(t, addr, "", "jobs", "results", id); r2.stdout != string(b) {
		t.Fatalf("results to stdout differ from the file:\n%s\nvs\n%s", r2.stdout, b)
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

	r = ctl(t, addr, "", "jobs", "list")
	if r.code != 0 || !strings.Contains(r.stdout, id+"\tsmall\tcompleted") || !strings.Contains(r.stdout, big+"\tbig\tcancelled") {
		t.Fatalf("list: %+v", r)
	}
	r = ctl(t, addr, "", "jobs", "list", "-o", "json")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("list -o json: %+v", r)
	}

	r = ctl(t, addr, "", "jobs", "get", id)
	if r.code != 0 || !strings.Contains(r.stdout, "id\t"+id+"\n") || !strings.Contains(r.stdout, "state\tcompleted\n") ||
		!strings.Contains(r.stdout, "items\t5/5 done, 5 succeeded") || !strings.Contains(r.stdout, "items/s") {
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
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 160}); err != nil {
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
	if !regexp.MustCompile(`job +200/200 \[=+\] +100 % completed`).MatchString(screen.String()) {
		t.Errorf("no complete bar:\n%q", screen.String())
	}
}
