package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() {
	os.Exit(execute(context.Background(), os.Args[1:], env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		lookupEnv: os.LookupEnv, isTerminal: isTerminal,
	}))
}

// env is what a command sees of its process, so that tests can run
// commands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	// isTerminal reports whether w is a terminal (progress bars are drawn
	// only on one).
	isTerminal func(w io.Writer) bool
}

// exitError carries a command's exit code; its message, when not empty, is
// printed on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError marks bad arguments or flags (exit 2).
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// execute runs batcherctl with args and returns its exit code.
func execute(ctx context.Context, args []string, e env) int {
	root, a := newRootCmd(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if se := (*serviceError)(nil); errors.As(err, &se) && se.code == codes.Unauthenticated {
		// The service says no more than "unauthenticated", by design; what
		// batcherctl sent is what the user can act on.
		err = fmt.Errorf("%w (%s)", err, a.unauthenticatedHint())
	}
	code := exitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if strings.HasPrefix(err.Error(), "unknown command ") {
		code = exitUsage // cobra's, from the root's own argument check
	}
	if msg := err.Error(); msg != "" {
		_, _ = fmt.Fprintf(e.stderr, "batcherctl: %s\n", msg)
	}
	if code == exitUsage {
		// The help of the command that failed, where its flags are listed.
		_, _ = fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}
