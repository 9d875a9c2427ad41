package main

import (
	"flag"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestIsTransport(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		msg  string
		want bool
	}{
		{codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`, true},
		{codes.Unavailable, "error reading from server: EOF", true},
		{codes.Unavailable, "transport is closing", true},
		{codes.Unavailable, "the connection is draining", true},
		// batcherd's own answers, a terminal result even when they quote
		// an upstream's connection trouble
		{codes.Unavailable, `upstream unreachable: backend "sim": Post "http://127.0.0.1:9/v1/completions": read tcp: connection reset by peer`, false},
		{codes.Unavailable, "server shut down before the request completed", false},
		{codes.Internal, "transport is closing", false},
	} {
		if got := isTransport(status.New(tc.code, tc.msg)); got != tc.want {
			t.Errorf("isTransport(%v %q) = %v, want %v", tc.code, tc.msg, got, tc.want)
		}
	}
}

// TestHelp: -h says what soak is for and gives examples, then the flags.
func TestHelp(t *testing.T) {
	var out strings.Builder
	flag.CommandLine.SetOutput(&out)
	t.Cleanup(func() { flag.CommandLine.SetOutput(nil) })
	printUsage()
	help := out.String()
	if !strings.HasPrefix(help, "Usage: soak [flags]\n\nsoak drives the real batcherd") || !strings.Contains(help, "Examples:\n  # ") {
		t.Errorf("-h:\n%s", help)
	}
}
