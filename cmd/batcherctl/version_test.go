package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Both binaries answer --version with their module and the VCS revision
// they were built from, as the Go tool reads it from the binary (go
// version -m). A binary built without VCS information (a git worktree,
// -buildvcs=false) says so instead.
func TestVersion(t *testing.T) {
	batcherd, batcherctl := binaries(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	revRE := regexp.MustCompile(`(?m)^\s+build\s+vcs\.revision=(\S+)$`)
	for _, bin := range []struct{ name, path string }{{"batcherd", batcherd}, {"batcherctl", batcherctl}} {
		info, err := exec.Command(goBin, "version", "-m", bin.path).Output()
		if err != nil {
			t.Fatalf("go version -m %s: %v", bin.name, err)
		}
		want := "no VCS revision"
		if m := revRE.FindSubmatch(info); m != nil {
			want = "revision " + string(m[1])
		}
		cmd := exec.Command(bin.path, "--version")
		cmd.Env = cleanEnv()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s --version: %v", bin.name, err)
		}
		got := string(out)
		if !strings.HasPrefix(got, bin.name+" ") || strings.Count(got, "\n") != 1 ||
			!strings.Contains(got, "module github.com/batcherhq/batcher") || !strings.Contains(got, want) {
			t.Errorf("%s --version = %q, want one line with its name, the module and %q", bin.name, got, want)
		}
	}
}
