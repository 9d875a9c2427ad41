package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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
	cmd := exec.CommandContext(ctx, bin, "--addr", addr, "run", in, "--out", out)
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

// Ctrl-C typed on the terminal: the draining notice goes above the bar, on
// a line of its own (not after the echoed ^C, not through the bar), and
// says how to abort.
func TestRunInterruptOnTerminal(t *testing.T) {
	addr := startBatcherd(t, slowConfig)
	_, bin := binaries(t)
	in := writeFile(t, "in.jsonl", requestsFile(1000, nil))
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
	cmd := exec.CommandContext(ctx, bin, "--addr", addr, "run", in, "--out", out, "--window", "32")
	cmd.Env = append(cleanEnv(), "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// Its own session, with the pseudo-terminal as its controlling one, so
	// that a typed ^C reaches it as SIGINT, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	var screen bytes.Buffer
	buf := make([]byte, 4096)
	bar := regexp.MustCompile(`in\.jsonl +[1-9]\d*/1000`)
	for !bar.Match(screen.Bytes()) {
		n, err := ptmx.Read(buf)
		screen.Write(buf[:n])
		if err != nil {
			t.Fatalf("no bar before the end: %v\n%q", err, screen.String())
		}
	}
	if _, err := ptmx.Write([]byte{3}); err != nil { // ^C
		t.Fatal(err)
	}
	_, _ = io.Copy(&screen, ptmx)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want %d:\n%q", err, exitInterrupted, screen.String())
	}
	s := screen.String()
	if !strings.Contains(s, "\r\x1b[Kbatcherctl run: interrupted: draining the ") || !strings.Contains(s, "press Ctrl-C again to abort\r\n") {
		t.Errorf("no draining notice on a line of its own:\n%q", s)
	}
}
