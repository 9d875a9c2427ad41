package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandExplainsItself: every command a newcomer can run has a
// long help beyond its one-line summary, and an example; jobs list and
// jobs cancel once had neither a long help nor more than one example.
// Cobra's own completion and help commands are cobra's.
func TestEveryCommandExplainsItself(t *testing.T) {
	root, _ := newRootCmd(env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		lookupEnv: func(string) (string, bool) { return "", false }, isTerminal: func(io.Writer) bool { return false }})
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Name() == "help" || c.Name() == "completion" || (c.HasParent() && c.Parent().Name() == "completion") {
			return
		}
		n++
		if strings.TrimSpace(c.Long) == "" {
			t.Errorf("%q has no long help", c.CommandPath())
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no example", c.CommandPath())
		}
	}
	walk(root)
	if n < 10 {
		t.Fatalf("only %d commands found", n)
	}
}
