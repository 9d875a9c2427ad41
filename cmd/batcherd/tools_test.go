package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// make test announces up front, before go test runs, each outside tool a
// test here needs (requireTool) and whether its test will run or skip:
// go test shows a skip only with -v.
func TestMakeAnnouncesToolSkips(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`requireTool\(t, "([^"]+)"`)
	tools := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			tools[m[1]] = true
		}
	}
	if len(tools) < 2 {
		t.Fatalf("found requireTool calls for %v, want chromium and prometheus at least", tools)
	}
	cmd := exec.Command(mk, "-s", "--no-print-directory", "-C", filepath.Join("..", ".."), "check-services")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make check-services: %v\n%s", err, out)
	}
	for tool := range tools {
		announced := false
		for line := range strings.Lines(string(out)) {
			if strings.Contains(strings.ToLower(line), tool) {
				announced = true
			}
		}
		if !announced {
			t.Errorf("make check-services does not say whether the tests needing %s run:\n%s", tool, out)
		}
	}
}
