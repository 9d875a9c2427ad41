package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batcherhq/batcher/client"
	"github.com/batcherhq/batcher/cmd/batcherctl/internal/runfile"
)

// Progress modes of run's --progress.
const (
	progressAuto  = "auto"
	progressBar   = "bar"
	progressPlain = "plain"
	progressNone  = "none"
)

// runGCPercent is run's GOGC: less collection for a bounded heap.
const runGCPercent = 400

type runFlags struct {
	output           string
	resume           bool
	force            bool
	window           int
	model            string
	progress         string
	progressInterval time.Duration
	summary          outputFormat
}

func newRunCmd(a *app) *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run FILE.jsonl [--out RESULTS.jsonl]",
		Short: "Stream a JSONL file of requests and write their results in order",
		Long: `run streams a file of requests through one SubmitStream and writes one result
line per request, in input order. FILE "-" reads standard input.

Each input line is a batcher.v1.Request in protobuf JSON, such as
  {"id":"q1","model":"sim-chat","chat":{"messages":[{"role":"user","content":"Hi"}]}}
A request without an id gets "line-N", N its line number; blank lines are
skipped. Each result line is
  {"line":N,"id":"...","completion":{...}}             on success
  {"line":N,"id":"...","error":{"code":"...","message":"..."}}   on failure
(a completion that failed has both). A line that is not a request, or a
request the service rejects (an unknown model, a bad field), becomes an
error line and the run goes on.

Progress goes to standard error: a live bar on a terminal, a plain line
every --progress-interval otherwise. At the end a summary says what was
written; the exit code is 0 when every request succeeded, 1 when some failed
or the run could not finish, 130 when interrupted.

Ctrl-C stops reading, flushes the service's partial batches, waits for the
requests in flight and writes their results: the results file then holds the
results of a prefix of the input, and --resume finishes it. A second Ctrl-C
aborts at once (the file stays consistent; the requests in flight are sent
again on --resume).

--resume finishes a results file: the requests whose id it holds with a
completion are skipped; those it holds as error lines (a model that was down,
a deadline) are sent again, their old error lines dropped first (the file is
rewritten without them); the rest are appended. A last line cut short (a
crash) is dropped too. The exit code then says how the whole file stands: 0
only when no line of it is an error. Results a resume sent again come after
the lines kept, so sort by "line" for input order. Without --resume or
--force an existing results file is an error.

Memory is bounded by --window: at most that many requests are sent and not
yet written, which is also the size of the buffer that puts results back in
input order. Ctrl-C waits for them all: lower --window for a slow model.
A tenant with an in_flight quota has every request past it refused
(RESOURCE_EXHAUSTED "quota in_flight exceeded: limit N requests in flight"
lines): set --window to N.`,
		Example: `  # Results to a file, progress on the terminal
  batcherctl run prompts.jsonl --out results.jsonl

  # Finish a run that was interrupted
  batcherctl run prompts.jsonl --out results.jsonl --resume

  # From a pipe to a pipe, requests without a model go to sim-chat
  jq -c '{chat:{messages:[{role:"user",content:.q}]}}' questions.jsonl |
    batcherctl run - --model sim-chat | jq -r '.completion.text'

  # The failed lines of a run
  jq -c 'select(.error)' results.jsonl`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("output") {
				if cmd.Flags().Changed("out") {
					return usageError("--out and -o/--output (its old name) both given: give --out alone")
				}
				// Cobra keeps pflag's deprecation notice to itself: say it.
				if _, err := fmt.Fprintln(cmd.ErrOrStderr(), "batcherctl run: -o/--output is the old name of the results file: use --out (-f); -o is an output format in batcherctl's other commands"); err != nil {
					return err
				}
			}
			return runRun(cmd, a, &f, args[0])
		},
	}
	fl := c.Flags()
	fl.StringVarP(&f.output, "out", "f", "-", `the results file; "-" is standard output`)
	// -o/--output, run's old name of the results file, keeps working
	// and says what to use: -o is an output format in every other
	// command (and jobs results writes to --out too).
	fl.StringVarP(&f.output, "output", "o", "-", "the results file: the old name of --out")
	_ = fl.MarkHidden("output")
	fl.BoolVar(&f.resume, "resume", false, "finish the results file: skip the requests it holds as succeeded, send again those that failed, append the rest")
	fl.BoolVar(&f.force, "force", false, "overwrite an existing results file")
	fl.IntVar(&f.window, "window", runfile.DefaultWindow, "most requests sent and not yet written (bounds memory, and what Ctrl-C waits for)")
	fl.StringVarP(&f.model, "model", "m", "", "the route of requests whose line names none")
	fl.StringVar(&f.progress, "progress", progressAuto, "auto (a bar on a terminal, plain lines otherwise), bar, plain or none")
	fl.DurationVar(&f.progressInterval, "progress-interval", 5*time.Second, "how often plain progress lines are printed")
	f.summary = outputText
	fl.Var(&f.summary, "summary", "the closing summary's format: text, or json for scripts (on standard output when the results go to a file)")
	return c
}

func runRun(cmd *cobra.Command, a *app, f *runFlags, input string) error {
	if err := checkRunFlags(f, input); err != nil {
		return err
	}
	toStdout := f.output == "-"

	// Memory is bounded by --window, so trade some of it for CPU: a run
	// allocates per request, and the service often shares the machine.
	debug.SetGCPercent(runGCPercent)

	// The input.
	in, total, err := openInput(cmd.InOrStdin(), input)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()

	// The results file.
	var (
		out     = cmd.OutOrStdout()
		skip    map[string]struct{}
		scanned runfile.Scanned
	)
	if !toStdout {
		file, s, err := openResults(f.output, f.resume, f.force)
		if err != nil {
			return err
		}
		defer func() { _ = file.Close() }() // closed below; this is for early returns
		out, skip, scanned = file, s.Done, s
		total -= int64(s.Lines)
	}

	conn, err := a.dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()

	counters := new(runfile.Counters)
	counters.Total.Store(max(total, 0))

	// Ctrl-C: the first stops gently, the second aborts.
	ctx, abort := context.WithCancel(cmd.Context())
	defer abort()
	stop := make(chan struct{})
	prog := runProgress(a, f, input)
	defer watchInterrupts(a, prog, counters, stop, abort)()

	sum, runErr := runfile.Run(ctx, runfile.Config{
		Client:   client.New(conn),
		Input:    in,
		Output:   out,
		Skip:     skip,
		Window:   f.window,
		Model:    f.model,
		Timeout:  a.timeout,
		Stop:     stop,
		Counters: counters,
		Progress: prog,
	})
	if c, ok := out.(io.Closer); ok && !toStdout {
		if err := c.Close(); err != nil && runErr == nil {
			runErr = fmt.Errorf("closing %s: %w", f.output, err)
		}
	}
	if err := printRunSummary(cmd, f, sum, scanned, runErr); err != nil {
		return err
	}
	return runExit(f, sum, scanned.Failed, ctx.Err() != nil, runErr)
}

// checkRunFlags refuses flags that cannot work together, naming them.
func checkRunFlags(f *runFlags, input string) error {
	if f.window < 1 {
		return usageError("--window: must be at least 1, got %d", f.window)
	}
	switch f.progress {
	case progressAuto, progressBar, progressPlain, progressNone:
	default:
		return usageError("--progress: must be auto, bar, plain or none, got %q", f.progress)
	}
	if f.progressInterval < 0 {
		return usageError("--progress-interval: must not be negative, got %v", f.progressInterval)
	}
	toStdout := f.output == "-"
	if toStdout && f.resume {
		return usageError("--resume: needs a results file (--out FILE)")
	}
	if !toStdout && input != "-" && sameFile(input, f.output) {
		return usageError("--out: the results file %s is the input file", f.output)
	}
	return nil
}

// runProgress is the run's progress display as --progress asks: a bar on
// a terminal, plain lines elsewhere (auto), or none (nil).
func runProgress(a *app, f *runFlags, input string) runfile.Progress {
	stderr := a.env.stderr
	switch f.progress {
	case progressAuto:
		if a.env.isTerminal(stderr) {
			return runfile.NewBar(stderr, filepath.Base(input))
		}
		return runfile.NewPlain(stderr, "batcherctl run:", f.progressInterval)
	case progressBar:
		return runfile.NewBar(stderr, filepath.Base(input))
	case progressPlain:
		return runfile.NewPlain(stderr, "batcherctl run:", f.progressInterval)
	}
	return nil
}

// watchInterrupts turns the first Ctrl-C (or SIGTERM) into closing stop,
// which drains the requests in flight, and the second into abort, until
// the returned function is called; that function returns when it has
// stopped watching.
func watchInterrupts(a *app, prog runfile.Progress, counters *runfile.Counters, stop chan struct{}, abort func()) (done func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	stderr := a.env.stderr
	notice := func(msg string) {
		if prog != nil {
			prog.Notice(msg) // above the bar, not through it
			return
		}
		_, _ = fmt.Fprintln(stderr, msg)
	}
	watched, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for n := 0; ; n++ {
			select {
			case <-finished:
				return
			case <-sigs:
			}
			if n == 0 {
				notice(fmt.Sprintf("batcherctl run: interrupted: draining the %s in flight (their results are written); press Ctrl-C again to abort",
					plural(counters.Sent.Load()-counters.Done.Load(), "request")))
				close(stop)
				continue
			}
			notice("batcherctl run: aborting")
			abort()
			return
		}
	}()
	return func() {
		close(finished)
		<-watched
		signal.Stop(sigs)
	}
}

// runExit is the command's error for how the run ended: interrupted (with
// the hint to resume), unfinished, or finished with failed requests.
// retried counts the requests a resumed run sent again because they had
// failed before: every failure is then this run's, and the results file
// holds exactly sum.Failed error lines.
func runExit(f *runFlags, sum runfile.Summary, retried int, aborted bool, runErr error) error {
	toStdout := f.output == "-"
	where := f.output
	if toStdout {
		where = "the results"
	}
	switch {
	case aborted || sum.Stopped:
		return &exitError{code: exitInterrupted, err: fmt.Errorf("run interrupted: %s written; rerun with --resume to finish", plural(sum.Written, "result"))}
	case runErr != nil:
		hint := ""
		if !toStdout {
			hint = "; rerun with --resume to finish"
		}
		if st, ok := serviceStatus(runErr); ok { // the service ended the stream
			return &serviceError{msg: fmt.Sprintf("run: %s: %s (%s written%s)", codeName(st.Code()), st.Message(), plural(sum.Written, "result"), hint), code: st.Code()}
		}
		return fmt.Errorf("run did not finish (%s written%s): %w", plural(sum.Written, "result"), hint, runErr)
	case sum.Failed > 0 && retried > 0:
		return fmt.Errorf("%d of %s failed (%d had failed before and were retried): see the error lines in %s", sum.Failed, plural(sum.Written, "request"), retried, where)
	case sum.Failed > 0:
		return fmt.Errorf("%d of %s failed: see the error lines in %s", sum.Failed, plural(sum.Written, "request"), where)
	}
	return nil
}

// runSummary is the closing summary in JSON.
type runSummary struct {
	Read       int64   `json:"read"`
	Skipped    int64   `json:"skipped"`
	Retried    int     `json:"retried"`
	Written    int64   `json:"written"`
	Failed     int64   `json:"failed"`
	Unanswered int64   `json:"unanswered"`
	Stopped    bool    `json:"stopped"`
	Tokens     int64   `json:"tokens"`
	Seconds    float64 `json:"seconds"`
	Error      string  `json:"error,omitempty"`
}

func printRunSummary(cmd *cobra.Command, f *runFlags, sum runfile.Summary, resumed runfile.Scanned, runErr error) error {
	if f.summary == outputJSON {
		js := runSummary{
			Read: sum.Read, Skipped: sum.Skipped, Retried: resumed.Failed, Written: sum.Written, Failed: sum.Failed,
			Unanswered: sum.Unanswered, Stopped: sum.Stopped, Tokens: sum.Tokens, Seconds: sum.Elapsed.Seconds(),
		}
		if runErr != nil {
			js.Error = runErr.Error()
		}
		b, err := json.Marshal(js)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if f.output == "-" {
			w = cmd.ErrOrStderr()
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "batcherctl run: %s written (%d failed) in %v", plural(sum.Written, "result"), sum.Failed, sum.Elapsed.Round(time.Millisecond))
	if sum.Elapsed > 0 {
		fmt.Fprintf(&b, ", %.0f req/s", float64(sum.Written)/sum.Elapsed.Seconds())
	}
	if sum.Skipped > 0 || resumed.Lines > 0 {
		fmt.Fprintf(&b, "; %d already done, skipped", sum.Skipped)
	}
	if resumed.Failed > 0 {
		fmt.Fprintf(&b, "; %d that had failed, sent again", resumed.Failed)
	}
	if sum.Unanswered > 0 {
		fmt.Fprintf(&b, "; %d sent without an answer", sum.Unanswered)
	}
	b.WriteByte('\n')
	_, err := cmd.ErrOrStderr().Write(b.Bytes())
	return err
}

// openInput opens the request file ("-": r) and estimates how many requests
// it holds (its lines; 0 when unknown).
func openInput(r io.Reader, name string) (io.ReadCloser, int64, error) {
	if name == "-" {
		return io.NopCloser(r), 0, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, err
	}
	n, err := countLines(f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("reading %s: %w", name, err)
	}
	return f, n, nil
}

// countLines counts the lines of r, a last one without a newline included.
func countLines(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	last := byte('\n')
	for {
		k, err := r.Read(buf)
		if k > 0 {
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if errors.Is(err, io.EOF) {
			if last != '\n' {
				n++
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// openResults opens the results file: a new one, an overwritten one
// (force), or, to resume, an existing one scanned for the ids that
// succeeded and cut after its last complete line. When the file holds
// error lines, resuming rewrites it without them (into a temporary file
// renamed over it, so that a crash leaves the old file or the new one),
// and the resumed run sends those requests again.
func openResults(name string, resume, force bool) (*os.File, runfile.Scanned, error) {
	var none runfile.Scanned
	switch {
	case resume:
		f, s, err := resumeResults(name)
		if err != nil {
			return nil, none, fmt.Errorf("--resume: %s: %w", name, err)
		}
		return f, s, nil
	case force:
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		return f, none, err
	default:
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			return nil, none, usageError("%s exists: pass --resume to finish it or --force to overwrite it", name)
		}
		return f, none, err
	}
}

// resumeResults opens the results file name for a resumed run, positioned
// after its last complete line, with its error lines dropped.
func resumeResults(name string) (*os.File, runfile.Scanned, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, runfile.Scanned{}, err
	}
	s, err := runfile.ScanResults(f)
	if err == nil && s.Failed > 0 {
		_ = f.Close()
		return rewriteSucceeded(name)
	}
	if err == nil {
		err = f.Truncate(s.Size)
	}
	if err == nil {
		_, err = f.Seek(s.Size, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, s, err
	}
	return f, s, nil
}

// rewriteSucceeded replaces the results file name by its lines that
// succeeded and returns it open for appending.
func rewriteSucceeded(name string) (_ *os.File, s runfile.Scanned, err error) {
	src, err := os.Open(name)
	if err != nil {
		return nil, s, err
	}
	defer func() { _ = src.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".resume-*")
	if err != nil {
		return nil, s, err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 256<<10)
	if s, err = runfile.KeepSucceeded(w, src); err != nil {
		return nil, s, err
	}
	if err = w.Flush(); err != nil {
		return nil, s, err
	}
	if fi, serr := src.Stat(); serr == nil {
		_ = tmp.Chmod(fi.Mode().Perm())
	}
	if err = tmp.Sync(); err != nil {
		return nil, s, err
	}
	if err = os.Rename(tmp.Name(), name); err != nil {
		return nil, s, err
	}
	return tmp, s, nil
}

// sameFile reports whether a and b name one existing file.
func sameFile(a, b string) bool {
	ia, err := os.Stat(a)
	if err != nil {
		return false
	}
	ib, err := os.Stat(b)
	return err == nil && os.SameFile(ia, ib)
}
