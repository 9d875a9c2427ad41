// Command soak drives the real batcherd binary and reports whether it keeps
// its promises under load, faults and a shutdown.
//
// Two modes:
//
//	soak -mode soak    (make soak) llmsim with faults behind batcherd, mixed
//	                   online traffic for about 3 minutes, then SIGTERM;
//	soak -mode unread  1,000 streams that send and never read: batcherd's
//	                   RSS above idle.
//
// It builds batcherd and llmsim with the go tool unless -batcherd and
// -llmsim name binaries. It exits 1 when a promise was broken: a request
// accepted without a terminal result, or one answered past its deadline.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// usage is what -h prints before the flags.
const usage = `Usage: soak [flags]

soak drives the real batcherd binary and reports whether it keeps its
promises under load, faults and a shutdown. Mode soak starts llmsim with
injected faults behind batcherd, sends mixed online traffic (unary calls and
streams at every priority, some cancelled, with flushes) for about 3
minutes, then sends SIGTERM in the midst of more load, and checks that every
accepted request got a terminal result, none past its deadline. Mode
unread opens streams that send and never read, and reports batcherd's
memory above idle. Unless -batcherd and -llmsim name binaries it
builds them with the go tool, so run it from the repository's root. It exits
1 when a promise was broken, 2 when it could not run.

Examples:
  # The soak, as make soak runs it
  soak -mode soak -batcherd bin/batcherd -llmsim bin/llmsim

  # A shorter, lighter soak, building both binaries first
  soak -mode soak -load 30s -rate 50

  # Memory held by 1,000 streams that never read, and the baseline without stream limits
  soak -mode unread -batcherd bin/batcherd
  soak -mode unread -batcherd bin/batcherd -unlimited

Flags:
`

// printUsage writes usage and the flags to the flag package's output.
func printUsage() {
	_, _ = fmt.Fprint(flag.CommandLine.Output(), usage)
	flag.PrintDefaults()
}

func main() {
	mode := flag.String("mode", "soak", "soak or unread")
	batcherd := flag.String("batcherd", "", "batcherd binary (default: go build ./cmd/batcherd)")
	llmsim := flag.String("llmsim", "", "llmsim binary (default: go build ./cmd/llmsim)")
	load := flag.Duration("load", 140*time.Second, "soak: how long the main load runs")
	rate := flag.Int("rate", 150, "soak: requests a second, roughly")
	streams := flag.Int("streams", 1000, "unread: streams that never read")
	perStream := flag.Int("per-stream", 300, "unread: requests each stream sends")
	unlimited := flag.Bool("unlimited", false, "unread: lift the stream limits (the baseline)")
	flag.Usage = printUsage
	flag.Parse()

	dir, err := os.MkdirTemp("", "soak")
	if err != nil {
		fail(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if *batcherd == "" {
		*batcherd = build(dir, "batcherd")
	}
	if *llmsim == "" && *mode == "soak" {
		*llmsim = build(dir, "llmsim")
	}
	ctx := context.Background()
	var ok bool
	switch *mode {
	case "soak":
		ok = runSoak(ctx, dir, *batcherd, *llmsim, *load, *rate)
	case "unread":
		ok = runUnread(ctx, dir, *batcherd, *streams, *perStream, *unlimited)
	default:
		fail(fmt.Errorf("unknown -mode %q: want soak or unread", *mode))
	}
	if !ok {
		os.Exit(1)
	}
}

func build(dir, name string) string {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("building %s (run from the repository's root): %w", name, err))
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "soak:", err)
	os.Exit(2)
}

func writeFile(dir, name, content string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		fail(err)
	}
	return p
}
