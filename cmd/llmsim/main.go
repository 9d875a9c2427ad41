// Command llmsim serves an OpenAI-compatible simulated model on a port:
// /v1/chat/completions, /v1/completions, /v1/embeddings and /v1/models, and
// Anthropic's /v1/messages (the key as x-api-key), with
// deterministic output, realistic usage, a latency model, RPM and TPM limits
// and injected faults. Every knob of package llmsim's Config is a flag
// (all but its hooks, which are Go functions); run `llmsim -h` for the list.
//
//	llmsim -addr 127.0.0.1:8080 -latency 20ms -rpm 600
//
// It stops gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batcherhq/batcher/llmsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "llmsim:", err)
		os.Exit(2)
	}
}

// usage is what -h prints before the flags.
const usage = `Usage: llmsim [flags]

llmsim serves a simulated model on a port, so that Batcher (or any OpenAI or
Anthropic client) can be run, tested and benchmarked without a provider. It
speaks OpenAI's /v1/chat/completions, /v1/completions, /v1/embeddings,
/v1/models and Batch API (/v1/files, /v1/batches), and Anthropic's
/v1/messages and Message Batches (the key as x-api-key). Output is
deterministic, usage realistic; a latency model, RPM and TPM limits (429
with Retry-After) and injected faults (errors, hangs, resets, malformed
bodies) make it behave like a busy upstream. It stops gracefully on SIGINT
or SIGTERM.

Examples:
  # A model 20 ms away that takes 600 requests a minute
  llmsim -addr 127.0.0.1:8080 -latency 20ms -rpm 600

  # A flaky upstream: 5% of calls fail, 1% hang, 1% have their connection reset
  llmsim -error-rate 0.05 -timeout-rate 0.01 -reset-rate 0.01

  # Streamed answers that break after their first chunk: 2% cut, 1% stalled
  llmsim -stream-cut-rate 0.02 -stream-stall-rate 0.01

  # Callers must send the key held in $SIM_KEY; batches take 30 s to end
  SIM_KEY=sk-local llmsim -api-key-env SIM_KEY -batch-time 30s

  # Try it
  curl -s 127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "sim-chat", "messages": [{"role": "user", "content": "Hi"}]}'

Flags:
`

type options struct {
	addr            string
	apiKeyEnv       string
	logLevel        slog.Level
	shutdownTimeout time.Duration
	cfg             llmsim.Config
}

func parseFlags(args []string, out io.Writer) (*options, error) {
	o := &options{}
	c := &o.cfg
	fs := flag.NewFlagSet("llmsim", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	models := fs.String("models", strings.Join(llmsim.DefaultModels, ","), "comma-separated model names to serve")
	fs.StringVar(&o.apiKeyEnv, "api-key-env", "", "name of an environment variable holding the API key callers must send (default: no key)")
	fs.DurationVar(&c.Latency, "latency", 0, "base latency of every call")
	fs.DurationVar(&c.PerToken, "per-token", 0, "latency added per generated token")
	fs.DurationVar(&c.PerPromptToken, "per-prompt-token", 0, "latency added per prompt token")
	fs.IntVar(&c.MaxConcurrency, "max-concurrency", 0, "calls served at once; the rest wait (0: no bound)")
	fs.IntVar(&c.RPM, "rpm", 0, "requests per minute before 429 (0: no limit)")
	fs.IntVar(&c.TPM, "tpm", 0, "tokens per minute before 429 (0: no limit)")
	fs.IntVar(&c.ReplyTokens, "reply-tokens", llmsim.DefaultReplyTokens, "length of a full answer in tokens")
	fs.IntVar(&c.EmbeddingDim, "embedding-dim", llmsim.DefaultEmbeddingDim, "length of every embedding")
	fs.Int64Var(&c.MaxRequestBytes, "max-request-bytes", llmsim.DefaultMaxRequestBytes, "largest request body")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the fault draws")
	fs.Float64Var(&c.ErrorRate, "error-rate", 0, "share of calls answered 500, 502 or 503")
	fs.Float64Var(&c.TimeoutRate, "timeout-rate", 0, "share of calls that hang until the client gives up")
	fs.Float64Var(&c.ResetRate, "reset-rate", 0, "share of calls whose connection is reset")
	fs.Float64Var(&c.MalformedRate, "malformed-rate", 0, "share of calls answered 200 with a truncated or non-JSON body")
	fs.Float64Var(&c.PackMissingRate, "pack-missing-rate", 0, "share of packed items left unanswered")
	fs.Float64Var(&c.PackMalformedRate, "pack-malformed-rate", 0, "share of packed items answered with a number")
	fs.Float64Var(&c.PackUnparseableRate, "pack-unparseable-rate", 0, "share of packed calls answered with prose")
	fs.Float64Var(&c.ToolCallMalformedRate, "tool-call-malformed-rate", 0, "share of calls whose tool call's arguments are cut short (not JSON)")
	fs.Float64Var(&c.SchemaViolationRate, "schema-violation-rate", 0, "share of json_schema answers and tool calls whose JSON breaks their schema")
	fs.Float64Var(&c.StreamCutRate, "stream-cut-rate", 0, "share of streamed calls whose connection closes after the first chunk, without [DONE]")
	fs.Float64Var(&c.StreamStallRate, "stream-stall-rate", 0, "share of streamed calls that stop sending after the first chunk until the client gives up")
	fs.Float64Var(&c.StreamMalformedRate, "stream-malformed-rate", 0, "share of streamed calls that send a chunk that is not JSON after the first, and end")
	fs.DurationVar(&c.BatchTime, "batch-time", 0, "how long a batch (/v1/batches, /v1/messages/batches) takes from creation to its end (0: it ends at the first look)")
	fs.Float64Var(&c.BatchFailRate, "batch-fail-rate", 0, "share of batch lines that fail")
	fs.Float64Var(&c.BatchExpireRate, "batch-expire-rate", 0, "share of batch lines that expire (their batch ends expired)")
	fs.IntVar(&c.BatchMaxRequests, "batch-max-requests", llmsim.DefaultBatchMaxRequests, "most lines of one batch input file")
	fs.Int64Var(&c.BatchMaxFileBytes, "batch-max-file-bytes", llmsim.DefaultBatchMaxFileBytes, "largest batch input file")
	fs.Int64Var(&c.BatchQueueTokens, "batch-queue-tokens", 0, "tokens the batches not ended may hold; past it a batch fails token_limit_exceeded (0: no bound)")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 5*time.Second, "how long shutdown waits for calls in flight")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.Models = nil
	for m := range strings.SplitSeq(*models, ",") {
		c.Models = append(c.Models, strings.TrimSpace(m))
	}
	if o.apiKeyEnv != "" {
		c.APIKey = os.Getenv(o.apiKeyEnv)
		if c.APIKey == "" {
			return nil, fmt.Errorf("-api-key-env: environment variable %s is empty or unset", o.apiKeyEnv)
		}
	}
	if o.shutdownTimeout <= 0 {
		return nil, fmt.Errorf("-shutdown-timeout: must be positive, got %v", o.shutdownTimeout)
	}
	return o, nil
}

// run serves until ctx ends. ready, when set, learns the address it
// listens on.
func run(ctx context.Context, args []string, logOut io.Writer, ready func(addr string)) error {
	o, err := parseFlags(args, logOut)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: o.logLevel}))
	o.cfg.Logger = log
	sim, err := llmsim.New(o.cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           sim,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	c := &o.cfg
	log.Info("llmsim listening", "addr", ln.Addr().String(), "models", strings.Join(c.Models, ","),
		"latency", c.Latency, "per_token", c.PerToken, "rpm", c.RPM, "tpm", c.TPM, "max_concurrency", c.MaxConcurrency)
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		sim.Close()
		return err
	case <-ctx.Done():
	}
	log.Info("llmsim shutting down", "timeout", o.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if err != nil {
		// Calls still held by latency or a hang fault: abort them.
		sim.Close()
		err = errors.Join(err, srv.Close())
	}
	sim.Close()
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	st := sim.Stats()
	log.Info("llmsim stopped", "requests", st.Requests, "ok", st.OK, "rate_limited", st.RateLimited,
		"prompt_tokens", st.PromptTokens, "completion_tokens", st.CompletionTokens)
	return err
}
