package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batcherhq/batcher/client"
	"github.com/batcherhq/batcher/internal/version"
)

// DefaultAddr is the service --addr picks when neither the flag nor
// $BATCHERCTL_ADDR says: batcherd's default listen address.
const DefaultAddr = "127.0.0.1:50051"

// addrEnv names the environment variable that replaces DefaultAddr.
const addrEnv = "BATCHERCTL_ADDR"

// app holds the global flags, which every command reads.
type app struct {
	env     env
	addr    string
	timeout time.Duration
	tls     tlsFlags
	auth    authFlags
}

type tlsFlags struct {
	enabled    bool
	caFile     string
	certFile   string
	keyFile    string
	serverName string
}

// Command groups of the root's help.
const (
	groupRequests = "requests"
	groupService  = "service"
)

// newRootCmd builds the command tree and returns it with the app whose
// global flags it parses, which execute reads after a failure.
func newRootCmd(e env) (*cobra.Command, *app) {
	a := &app{env: e}
	addr := DefaultAddr
	if v, ok := e.lookupEnv(addrEnv); ok && v != "" {
		addr = v
	}
	root := &cobra.Command{
		Version: version.String("batcherctl"),
		Use:     "batcherctl",
		Short:   "Talk to a Batcher service from the command line",
		Long: `batcherctl talks to a Batcher service: it submits prompts, streams files
of requests through it with a live progress bar, runs durable batch jobs,
shows its live stats and checks its health.

The service is --addr (default ` + DefaultAddr + `, or $` + addrEnv + `), over plaintext
gRPC unless --tls is given. A service with tenants wants a bearer token:
--token, --token-file, $` + tokenEnv + ` or $` + tokenFileEnv + ` (plaintext only to a
loopback address; use --tls otherwise).`,
		Example: `  # One prompt, its completion printed
  batcherctl submit -m sim-chat "Write a haiku about queues"

  # A file of requests, one per line, results in input order
  batcherctl run prompts.jsonl --out results.jsonl

  # A durable batch job, followed to the end, its results saved
  id=$(batcherctl jobs create requests.jsonl -m sim-chat)
  batcherctl jobs watch "$id" && batcherctl jobs results "$id" > results.jsonl

  # Is the service up?
  batcherctl --addr batcher.internal:50051 health

  # A service with tenants, over TLS, its token in a file
  batcherctl --addr batcher.internal:50051 --tls --token-file ~/.batcher-token jobs list`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	root.SetVersionTemplate("{{.Version}}\n")

	pf := root.PersistentFlags()
	pf.StringVar(&a.addr, "addr", addr, "the service's address, host:port (env "+addrEnv+")")
	pf.DurationVar(&a.timeout, "timeout", 0, "bound on each request: the RPC deadline of submit, health and jobs get, list, cancel and delete, and in run the timeout of requests that set none (0: none)")
	pf.BoolVar(&a.tls.enabled, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	pf.StringVar(&a.tls.caFile, "tls-ca", "", "PEM file of the CAs that sign the service's certificate (default: the system's)")
	pf.StringVar(&a.tls.certFile, "tls-cert", "", "PEM file of a client certificate, for mutual TLS (with --tls-key)")
	pf.StringVar(&a.tls.keyFile, "tls-key", "", "PEM file of the client certificate's key")
	pf.StringVar(&a.tls.serverName, "tls-server-name", "", "the name to verify the service's certificate against (default: --addr's host)")
	pf.StringVar(&a.auth.token, "token", "", "bearer token of a tenant (env "+tokenEnv+"); prefer --token-file, which keeps it out of the process list")
	pf.StringVar(&a.auth.tokenFile, "token-file", "", "file holding the bearer token on its first line (env "+tokenFileEnv+")")

	a.addRunHooks(root)

	root.AddGroup(
		&cobra.Group{ID: groupRequests, Title: "Requests:"},
		&cobra.Group{ID: groupJobs, Title: "Batch jobs:"},
		&cobra.Group{ID: groupService, Title: "Service:"},
	)
	for _, c := range []struct {
		group string
		cmd   *cobra.Command
	}{
		{groupRequests, newSubmitCmd(a)},
		{groupRequests, newRunCmd(a)},
		{groupJobs, newJobsCmd(a)},
		{groupService, newStatsCmd(a)},
		{groupService, newHealthCmd(a)},
	} {
		c.cmd.GroupID = c.group
		root.AddCommand(c.cmd)
	}
	root.SetHelpCommandGroupID(groupService)
	root.SetCompletionCommandGroupID(groupService)
	return root, a
}

// addRunHooks adds root's hidden --cpuprofile flag and the hooks around
// every command: the global flags' checks before it, and the profile.
func (a *app) addRunHooks(root *cobra.Command) {
	pf := root.PersistentFlags()
	var cpuProfile string
	pf.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file")
	_ = pf.MarkHidden("cpuprofile")
	var stopProfile func()
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		// A negative bound would otherwise pass as "none" (callContext sets
		// a deadline only above 0): refuse it, as --progress-interval does.
		if a.timeout < 0 {
			return usageError("--timeout: must not be negative (0: none), got %v", a.timeout)
		}
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); _ = f.Close() }
		return nil
	}
	root.PersistentPostRun = func(*cobra.Command, []string) {
		if stopProfile != nil {
			stopProfile()
		}
	}
}

// dialOptions are the connection's options from the global flags: the
// transport's, and the bearer token's when one is given.
func (a *app) dialOptions() ([]grpc.DialOption, error) {
	tok, err := a.resolveToken()
	if err != nil {
		return nil, err
	}
	opts, secure, err := a.transportOptions()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		if !secure && !isLoopback(a.addr) {
			return nil, usageError("--token: refusing to send a token in plaintext to %s, which is not a loopback address; add --tls", a.addr)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken{token: tok, secure: secure}))
	}
	return opts, nil
}

// transportOptions are the TLS (or plaintext) options, and whether they
// are TLS.
func (a *app) transportOptions() ([]grpc.DialOption, bool, error) {
	t := a.tls
	if !t.enabled && t.caFile == "" && t.certFile == "" && t.keyFile == "" && t.serverName == "" {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, false, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, false, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, false, fmt.Errorf("--tls-ca: %s holds no PEM certificate", t.caFile)
		}
	}
	if (t.certFile == "") != (t.keyFile == "") {
		return nil, false, usageError("--tls-cert and --tls-key go together")
	}
	if t.certFile != "" {
		cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			return nil, false, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, true, nil
}

// callContext bounds one call by --timeout, when it is set.
func (a *app) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout > 0 {
		return context.WithTimeout(ctx, a.timeout)
	}
	return context.WithCancel(ctx)
}

// dial connects to --addr. grpc.NewClient connects lazily, so a service
// that is down shows on the first call, as UNAVAILABLE.
func (a *app) dial() (*grpc.ClientConn, error) {
	if strings.TrimSpace(a.addr) == "" {
		return nil, usageError("--addr: must not be empty")
	}
	opts, err := a.dialOptions()
	if err != nil {
		return nil, err
	}
	// As Batcher's Go client dials (client.Dial): its trace propagation
	// and its flow-control windows, made for streamed deltas.
	conn, err := grpc.NewClient(a.addr, client.DialOptions(opts...)...)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", a.addr, err)
	}
	return conn, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// terminalWidth is the columns of the terminal w, 0 when it reports none.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}

// outputFormat is the -o/--output flag of commands that print a result.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (o *outputFormat) String() string { return string(*o) }
func (o *outputFormat) Type() string   { return "text|json" }
func (o *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case outputText, outputJSON:
		*o = outputFormat(s)
		return nil
	}
	return errors.New(`must be "text" or "json"`)
}

func addOutputFlag(c *cobra.Command, o *outputFormat) {
	*o = outputText
	c.Flags().VarP(o, "output", "o", "output format: text for people, json (protobuf JSON) for scripts")
}

// noArgs and friends check positional arguments, failing as usage errors.
func argsBetween(lo, hi int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < lo || (hi >= 0 && len(args) > hi) {
			switch {
			case hi == 0:
				return usageError("takes no arguments, got %q", args)
			case lo == hi:
				return usageError("takes %d argument(s), got %d", lo, len(args))
			case hi < 0:
				return usageError("takes at least %d argument(s), got %d", lo, len(args))
			default:
				return usageError("takes %d to %d arguments, got %d", lo, hi, len(args))
			}
		}
		return nil
	}
}
