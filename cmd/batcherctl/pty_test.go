package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// On a terminal, run draws a bar (mpb's), and a complete run's bar ends at
// 100%.
func TestRunBarOnTerminal(t *testing.T) {
	addr := startBatcherd(t, fastConfig)
	_, bin := binaries(t)
	in := writeFile(t, "in.jsonl", requestsFile(2000, nil))
	out := filepath.Join(t.TempDir(), "out.jsonl")

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
	cmd := exec.CommandContext(ctx, bin, "--addr", addr, "run", in, "-o", out)
	cmd.Env = append(cleanEnv(), "TERM=xterm")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close() // the child holds it now
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, ptmx) // ends with EIO once the child has exited
	}()
	err = cmd.Wait()
	<-read
	if err != nil {
		t.Fatalf("run on a terminal: %v\n%s", err, screen.String())
	}
	s := screen.String()
	bar := regexp.MustCompile(`in\.jsonl +\d+/\d+ 0 failed \[[=>-]+\] +\d+ %`)
	if !bar.MatchString(s) {
		t.Errorf("no bar drawn:\n%q", s)
	}
	final := regexp.MustCompile(`2000/2000 0 failed \[=+\] +100 % +\d+ req/s +\d+ tok/s +done`)
	if !final.MatchString(s) {
		t.Errorf("the bar does not end complete at 100%%:\n%q", s[max(0, len(s)-600):])
	}
	if strings.Contains(s, "batcherctl run: 2000/") {
		t.Errorf("plain progress lines on a terminal:\n%q", s)
	}
	if n := len(readResults(t, out)); n != 2000 {
		t.Errorf("%d results, want 2000", n)
	}
}
