package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

const groupJobs = "jobs"

// jobsCall dials --addr and runs f with a Jobs client and the command's
// context, bounded by --timeout when set.
func (a *app) jobsCall(cmd *cobra.Command, timeout bool, f func(context.Context, *client.Jobs) error) error {
	conn, err := a.dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx := cmd.Context()
	if timeout && a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	return f(ctx, client.NewJobs(grpc.ClientConnInterface(conn)))
}

func newJobsCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "jobs",
		Short: "Create, follow and read durable batch jobs",
		Long: `jobs drives the service's JobService: durable batch jobs that survive a restart.
A job is created from an OpenAI batch input file (JSONL: custom_id, method, url,
body), runs in the background, and its results are read back as JSONL.`,
		Example: `  id=$(batcherctl jobs create requests.jsonl -m sim-chat --name nightly)
  batcherctl jobs watch "$id"
  batcherctl jobs results "$id" > results.jsonl
  batcherctl jobs get "$id" -o json
  batcherctl jobs list -o json
  batcherctl jobs delete "$id"`,
		// Without RunE cobra would print the help and exit 0 for any
		// argument, so that a mistyped subcommand looked like success.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	c.AddCommand(newJobsCreateCmd(a), newJobsGetCmd(a), newJobsListCmd(a), newJobsWatchCmd(a), newJobsResultsCmd(a),
		newJobsCancelCmd(a), newJobsDeleteCmd(a))
	return c
}

func newJobsGetCmd(a *app) *cobra.Command {
	var out outputFormat
	c := &cobra.Command{
		Use:   "get ID",
		Short: "Show a job and its progress",
		Long: `get prints one job: its state, counts per run group, tokens, rate and ETA,
and where its output files are. -o json prints the whole Job message.`,
		Example: "  batcherctl jobs get job_7ea308f3105a729ad74b\n  batcherctl jobs get job_7ea308f3105a729ad74b -o json | jq .progress.eta",
		Args:    argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.jobsCall(cmd, true, func(ctx context.Context, j *client.Jobs) error {
				job, err := j.Get(ctx, args[0])
				if err != nil {
					return rpcError("jobs get "+args[0], err)
				}
				if out == outputJSON {
					return printJSON(cmd.OutOrStdout(), job)
				}
				_, err = io.WriteString(cmd.OutOrStdout(), jobText(job))
				return err
			})
		},
	}
	addOutputFlag(c, &out)
	return c
}

// jobText describes a job for people, one fact a line.
func jobText(job *batcherv1.Job) string {
	var b strings.Builder
	p := job.GetProgress()
	fmt.Fprintf(&b, "id\t%s\n", job.GetId())
	if n := job.GetSpec().GetName(); n != "" {
		fmt.Fprintf(&b, "name\t%s\n", n)
	}
	fmt.Fprintf(&b, "state\t%s\n", stateName(p.GetState()))
	fmt.Fprintf(&b, "items\t%s\n", countsText(p.GetCounts()))
	for _, g := range p.GetGroups() {
		fmt.Fprintf(&b, "  %s\t%s\n", g.GetGroup(), countsText(g.GetCounts()))
	}
	fmt.Fprintf(&b, "rate\t%s\n", rateText(p))
	fmt.Fprintf(&b, "tokens\t%d in, %d out\n", p.GetTokensIn(), p.GetTokensOut())
	if d := job.GetSpec().GetDispatch(); d != "" {
		fmt.Fprintf(&b, "dispatch\t%s\n", d)
	}
	if p.GetCostUsd() > 0 || p.GetSavingUsd() > 0 {
		fmt.Fprintf(&b, "cost\t$%.6f (saved $%.6f against online)\n", p.GetCostUsd(), p.GetSavingUsd())
	}
	if ub := p.GetUpstreamBatches(); len(ub) > 0 {
		fmt.Fprintf(&b, "upstream\t%s\n", upstreamText(p))
	}
	if t := job.GetCreatedAt(); t != nil {
		fmt.Fprintf(&b, "created\t%s\n", t.AsTime().Format(time.RFC3339))
	}
	if t := job.GetEndedAt(); t != nil {
		fmt.Fprintf(&b, "ended\t%s\n", t.AsTime().Format(time.RFC3339))
	}
	if e := job.GetError(); e != nil {
		fmt.Fprintf(&b, "error\t%s: %s\n", codeName(codes.Code(e.GetCode())), e.GetMessage())
	}
	if d := job.GetOutputDir(); d != "" {
		// Relative, and on the service's machine: say to what.
		under := "the service's data_dir"
		if job.GetSpec().GetOutputDir() != "" {
			under = "the service's jobs.output_root"
		}
		fmt.Fprintf(&b, "output\t%s (under %s)\n", d, under)
	}
	return b.String()
}

// upstreamText is a progress's upstream batches for people: the items
// waiting upstream, the batches by state, and the provider's ETA.
func upstreamText(p *batcherv1.JobProgress) string {
	ub := p.GetUpstreamBatches()
	states := make([]string, 0, len(ub))
	for s := range ub {
		states = append(states, s)
	}
	slices.Sort(states)
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%d %s", ub[s], s)
	}
	eta := "unknown"
	if e := p.GetUpstreamEta(); e != nil {
		eta = e.AsDuration().Round(time.Second).String()
	}
	return fmt.Sprintf("%d items waiting; batches: %s; eta %s", p.GetUpstreamItems(), strings.Join(parts, ", "), eta)
}

// rateText is a progress's rate, tokens per second and ETA, for people.
func rateText(p *batcherv1.JobProgress) string {
	eta := "unknown"
	if e := p.GetEta(); e != nil {
		eta = e.AsDuration().Round(time.Second).String()
	}
	s := fmt.Sprintf("%.1f items/s, %.0f tokens/s, eta %s", p.GetItemsPerHour()/3600, p.GetTokensPerSecond(), eta)
	if p.GetCostUsd() > 0 {
		s += fmt.Sprintf(", $%.4f", p.GetCostUsd())
	}
	if p.GetUpstreamItems() > 0 {
		s += fmt.Sprintf(", %d upstream", p.GetUpstreamItems())
	}
	return s
}

func newJobsDeleteCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a job, its results and its files",
		Long: `delete removes a job's rows and output files; a running job is cancelled
first. It prints nothing on success.`,
		Example: "  batcherctl jobs delete job_7ea308f3105a729ad74b",
		Args:    argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.jobsCall(cmd, true, func(ctx context.Context, j *client.Jobs) error {
				if err := j.Delete(ctx, args[0]); err != nil {
					return rpcError("jobs delete "+args[0], err)
				}
				return nil
			})
		},
	}
	return c
}

func newJobsCreateCmd(a *app) *cobra.Command {
	var (
		spec batcherv1.JobSpec
		cf   createFlags
		out  outputFormat
	)
	c := &cobra.Command{
		Use:   "create FILE",
		Short: "Create a job from a JSONL file of requests (- for stdin)",
		Long: `create sends FILE, an OpenAI batch input file (one JSON object a line: custom_id,
method, url, body), as a new job and prints its id. Lines the service cannot
read become error lines of the job's results; the job is still created.
(batcherctl run's format, batcher.v1.Request lines, is refused, saying so.)

Run groups fan every line out over models, runs and temperatures, and a
judge reads each line's runs: --group and --judge-*, or the whole JobSpec
in protobuf JSON with --spec (the flags then override it).`,
		Example: `  batcherctl jobs create requests.jsonl -m sim-chat
  cat requests.jsonl | batcherctl jobs create - --name nightly -o json

  # Two groups, the second moving to sim-chat when its model fails, and a judge
  batcherctl jobs create requests.jsonl \
    --group name=cold,model=sim-chat,runs=3,temperature=0.2 \
    --group name=hot,model=big-chat,temperature=1.0,next-model=sim-chat,delay=200ms,retries=2,backoff=1.5 \
    --judge-model sim-chat --judge-template @judge.tmpl --rpm 600`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			full, err := cf.spec(&spec)
			if err != nil {
				return err
			}
			r := cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				r = f
			}
			if r, err = checkBatchInput(args[0], r); err != nil {
				return err
			}
			return a.jobsCall(cmd, false, func(ctx context.Context, j *client.Jobs) error {
				resp, err := j.CreateJobFromJSONL(ctx, full, bufio.NewReader(r))
				if err != nil {
					return rpcError("jobs create", err)
				}
				if out == outputJSON {
					return printJSON(cmd.OutOrStdout(), resp)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), resp.GetJob().GetId())
				return err
			})
		},
	}
	c.Flags().StringVar(&spec.Name, "name", "", "the job's name")
	c.Flags().StringVarP(&spec.Model, "model", "m", "", "the route of lines that name no model")
	fl := c.Flags()
	fl.StringVar(&cf.specFile, "spec", "", "a file holding a JobSpec in protobuf JSON (run_groups, judge, limits...); the flags override it")
	fl.StringArrayVar(&cf.groups, "group", nil, "a run group: name=N[,model=M][,runs=K][,temperature=T][,next-model=M2][,delay=D][,retries=R][,retry-delay=D][,backoff=F] (repeatable)")
	fl.StringVar(&cf.judgeModel, "judge-model", "", "the judge's model (with --judge-template)")
	fl.StringVar(&cf.judgeTemplate, "judge-template", "", "the judge's Go template over .Input and .Runs, or @FILE")
	fl.Int32Var(&cf.rpm, "rpm", 0, "the job's requests per minute, on top of the backends' limits (0: none)")
	fl.Int64Var(&cf.tpm, "tpm", 0, "the job's tokens per minute, on top of the backends' limits (0: none)")
	fl.StringVar(&cf.outputDir, "output-dir", "", "where the job's files go, under the service's jobs.output_root")
	fl.StringVar(&cf.dispatch, "dispatch", "", "online, batch_api (the route's provider batch API, at its batch price) or auto (the batch API when the job's window allows); default online")
	addOutputFlag(c, &out)
	return c
}

func newJobsListCmd(a *app) *cobra.Command {
	var out outputFormat
	c := &cobra.Command{
		Use:   "list",
		Short: "List the jobs, newest first",
		Long: `list prints every job the caller may see (with tenants: its tenant's),
newest first, one a line: its id, name, state and counts (done of total,
succeeded, failed, and cancelled or expired when any). It reads the jobs a
page at a time until the last. -o json prints one Job message (protobuf
JSON) a line.`,
		Example: "  batcherctl jobs list\n  batcherctl jobs list -o json | jq -r '.id'",
		Args:    argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.jobsCall(cmd, true, func(ctx context.Context, j *client.Jobs) error {
				w := cmd.OutOrStdout()
				n := 0
				for job, err := range j.List(ctx, batcherv1.JobState_JOB_STATE_UNSPECIFIED) {
					if err != nil {
						return rpcError("jobs list", err)
					}
					if out == outputJSON {
						if err := printJSONLine(w, job); err != nil {
							return err
						}
						continue
					}
					p := job.GetProgress()
					if _, err := fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", job.GetId(), job.GetSpec().GetName(), stateName(p.GetState()), countsText(p.GetCounts())); err != nil {
						return err
					}
					n++
				}
				if n == 0 && out == outputText {
					// Not silence: say so, on stderr, where a script
					// reading the list does not see it.
					_, err := fmt.Fprintln(cmd.ErrOrStderr(), "no jobs")
					return err
				}
				return nil
			})
		},
	}
	addOutputFlag(c, &out)
	return c
}

func stateName(s batcherv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// countsText sums a job's items up; the cancelled and expired ones are
// named when there are any, so that "done" always adds up.
func countsText(c *batcherv1.JobCounts) string {
	ended := c.GetSucceeded() + c.GetFailed() + c.GetCancelled() + c.GetExpired()
	s := fmt.Sprintf("%d/%d done, %d succeeded, %d failed", ended, c.GetTotal(), c.GetSucceeded(), c.GetFailed())
	if n := c.GetCancelled(); n > 0 {
		s += fmt.Sprintf(", %d cancelled", n)
	}
	if n := c.GetExpired(); n > 0 {
		s += fmt.Sprintf(", %d expired", n)
	}
	return s
}

func newJobsWatchCmd(a *app) *cobra.Command {
	var out outputFormat
	c := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a job's progress until it ends",
		Long: `watch follows a job's progress until it reaches a terminal state: on a terminal
one progress bar per run group, otherwise one line per update (and per run
group), each with the job's rate, tokens per second and ETA. It exits 1
unless the job completed.`,
		Example: "  batcherctl jobs watch job_7ea308f3105a729ad74b\n  batcherctl jobs watch job_7ea308f3105a729ad74b -o json",
		Args:    argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.jobsCall(cmd, false, func(ctx context.Context, j *client.Jobs) error {
				w := cmd.OutOrStdout()
				var bars *jobBars
				// A terminal that reports no width (some CI pseudo-terminals,
				// a zero-sized window) gets plain lines: mpb draws nothing
				// there.
				if out == outputText && isTerminal(w) && terminalWidth(w) > 0 {
					bars = newJobBars(w)
				}
				last, err := j.Watch(ctx, args[0], func(p *batcherv1.JobProgress) error {
					if bars != nil {
						bars.update(p)
						return nil
					}
					if out == outputJSON {
						return printJSONLine(w, p)
					}
					if _, err := fmt.Fprintf(w, "%s %s; %s\n", stateName(p.GetState()), countsText(p.GetCounts()), rateText(p)); err != nil {
						return err
					}
					for _, g := range p.GetGroups() {
						if _, err := fmt.Fprintf(w, "  %s %s\n", g.GetGroup(), countsText(g.GetCounts())); err != nil {
							return err
						}
					}
					return nil
				})
				if bars != nil {
					bars.wait()
				}
				if err != nil {
					return rpcError("jobs watch "+args[0], err)
				}
				if last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED {
					return &exitError{code: exitFailed}
				}
				return nil
			})
		},
	}
	addOutputFlag(c, &out)
	return c
}

func newJobsResultsCmd(a *app) *cobra.Command {
	var file, format string
	var force bool
	c := &cobra.Command{
		Use:   "results ID",
		Short: "Write a job's results as JSONL",
		Long: `results writes the job's finished items, in item order, one JSON object
(protobuf JSON of JobResult, always with its item and run, 0 included) a
line, to stdout or the file --out names. As with run, an existing --out
file is an error without --force.

-o/--output is the output format, as in batcherctl's other commands; the
results have one, json (JSON lines), the default. -o once named the file:
-o FILE is now refused, naming --out.`,
		Example: "  batcherctl jobs results job_7ea308f3105a729ad74b > results.jsonl\n  batcherctl jobs results job_7ea308f3105a729ad74b --out results.jsonl\n" +
			"  batcherctl jobs results job_7ea308f3105a729ad74b | jq -c 'select(.outcome != \"JOB_ITEM_OUTCOME_SUCCEEDED\")'",
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkResultsFormat(format); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if file != "" && file != "-" {
				flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
				if force {
					flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
				}
				f, err := os.OpenFile(file, flag, 0o644)
				if errors.Is(err, fs.ErrExist) {
					return usageError("%s exists: pass --force to overwrite it", file)
				}
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				w = f
			}
			bw := bufio.NewWriter(w)
			err := a.jobsCall(cmd, false, func(ctx context.Context, j *client.Jobs) error {
				for r, err := range j.Results(ctx, args[0]) {
					if err != nil {
						return rpcError("jobs results "+args[0], err)
					}
					if err := printJSONLine(bw, r); err != nil {
						return err
					}
				}
				return nil
			})
			if ferr := bw.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	c.Flags().StringVarP(&file, "out", "f", "", "write to this file (default: stdout)")
	c.Flags().StringVarP(&format, "output", "o", string(outputJSON), "output format: json (JSON lines), the only one")
	c.Flags().BoolVar(&force, "force", false, "overwrite an existing --out file")
	return c
}

// checkResultsFormat checks jobs results' -o: json alone. Any other value
// is refused naming what to use instead, so that a script written when -o
// named the results file fails saying so, not by writing nowhere.
func checkResultsFormat(format string) error {
	switch format {
	case string(outputJSON):
		return nil
	case string(outputText):
		return usageError(`-o text: the results are JSON lines only (-o json); "jobs get" shows a job for people`)
	}
	return usageError("-o %q: -o is the output format now (json), as in the other commands; write the results to a file with --out %s", format, format)
}

func newJobsCancelCmd(a *app) *cobra.Command {
	var out outputFormat
	c := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job",
		Long: `cancel stops a job that has not ended: its queued items end cancelled, those
in flight may finish, and the job goes cancelling, then cancelled, with the
results it has (jobs results reads them). It prints the job's id and state;
-o json prints the whole Job message. A job that had already ended is left
as it is, and cancel fails (exit 1) naming the state it ended in.`,
		Example: "  batcherctl jobs cancel job_7ea308f3105a729ad74b\n  batcherctl jobs cancel job_7ea308f3105a729ad74b && batcherctl jobs watch job_7ea308f3105a729ad74b",
		Args:    argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.jobsCall(cmd, true, func(ctx context.Context, j *client.Jobs) error {
				// CancelJob refuses a job that had already ended,
				// FAILED_PRECONDITION naming its state, decided with the
				// cancel: no read before it, which a job could end after.
				job, err := j.Cancel(ctx, args[0])
				if err != nil {
					return rpcError("jobs cancel "+args[0], err)
				}
				if out == outputJSON {
					return printJSON(cmd.OutOrStdout(), job)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", job.GetId(), stateName(job.GetProgress().GetState()))
				return err
			})
		},
	}
	addOutputFlag(c, &out)
	return c
}
