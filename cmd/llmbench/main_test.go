package main

import (
	"flag"
	"strings"
	"testing"
)

// TestHelp: -h says what llmbench is for and gives examples, then the
// flags, the front scenario's among them.
func TestHelp(t *testing.T) {
	var out strings.Builder
	flag.CommandLine.SetOutput(&out)
	t.Cleanup(func() { flag.CommandLine.SetOutput(nil) })
	printUsage()
	help := out.String()
	if !strings.HasPrefix(help, "Usage: llmbench [flags]\n\nllmbench measures what Batcher saves") ||
		!strings.Contains(help, "Examples:\n  # ") || !strings.Contains(help, "-front-workers") {
		t.Errorf("-h:\n%s", help)
	}
}
