package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

func newStatsCmd(a *app) *cobra.Command {
	var (
		once     bool
		interval time.Duration
		out      outputFormat
	)
	c := &cobra.Command{
		Use:   "stats",
		Short: "Show the service's lanes, backends and jobs, live",
		Long: `stats follows the service's AdminService.WatchStats: its lanes (queued by
priority, in flight), backends (breaker, concurrency, rate use) and jobs. On a
terminal the view is redrawn in place; otherwise each snapshot is printed in
turn. --once prints one snapshot and exits.`,
		Example: `  batcherctl stats
  batcherctl stats --once -o json
  batcherctl stats --interval 5s > stats.log`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 0 {
				// Below 0 would be sent as unset and sample at the
				// service's interval, not what was asked.
				return usageError("--interval: must not be negative (0: the service's), got %v", interval)
			}
			conn, err := a.dial()
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			req := &batcherv1.WatchStatsRequest{}
			if interval > 0 {
				req.Interval = durationpb.New(interval)
			}
			st, err := batcherv1.NewAdminServiceClient(conn).WatchStats(cmd.Context(), req)
			if err != nil {
				return rpcError("stats", err)
			}
			w := cmd.OutOrStdout()
			tty := out == outputText && isTerminal(w)
			for {
				r, err := st.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return rpcError("stats", err)
				}
				s := r.GetSnapshot()
				if out == outputJSON {
					err = printJSON(w, s)
				} else {
					var b strings.Builder
					if tty {
						b.WriteString("\x1b[H\x1b[2J") // home, clear
					}
					writeStats(&b, s)
					_, err = io.WriteString(w, b.String())
				}
				if err != nil || once {
					return err
				}
			}
		},
	}
	c.Flags().BoolVar(&once, "once", false, "print one snapshot and exit")
	c.Flags().DurationVar(&interval, "interval", 0, "how often to sample (default: the service's stats interval)")
	addOutputFlag(c, &out)
	return c
}

// rateLimit formats a per-minute limit; 0 is no budget (admin.proto), shown
// as "unlimited" (the status page says "no limit") rather than a limit of 0.
func rateLimit(perMinute float64) string {
	if perMinute == 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(perMinute, 'f', 0, 64)
}

// writeStats writes a snapshot as text.
func writeStats(b *strings.Builder, s *batcherv1.StatsSnapshot) {
	fmt.Fprintf(b, "%s\n", s.GetTime().AsTime().Format(time.RFC3339))
	fmt.Fprintf(b, "LANES\n")
	for _, l := range s.GetLanes() {
		u, h, n, lo, d := l.GetQueuedUrgent(), l.GetQueuedHigh(), l.GetQueuedNormal(), l.GetQueuedLow(), l.GetQueuedDeferrable()
		fmt.Fprintf(b, "  %s\troute=%s backend=%s queued=%d (urgent=%d high=%d normal=%d low=%d deferrable=%d) in_flight=%d\n",
			l.GetName(), l.GetRoute(), l.GetBackend(), u+h+n+lo+d, u, h, n, lo, d, l.GetInFlight())
	}
	fmt.Fprintf(b, "BACKENDS\n")
	for _, be := range s.GetBackends() {
		fmt.Fprintf(b, "  %s\tbreaker=%s in_flight=%d/%d rpm=%.0f/%s tpm=%.0f/%s calls=%d requests=%d rate_limited=%d retries=%d",
			be.GetName(), be.GetBreaker(), be.GetInFlight(), be.GetConcurrencyLimit(), be.GetRpmUsed(), rateLimit(be.GetRpmLimit()),
			be.GetTpmUsed(), rateLimit(be.GetTpmLimit()), be.GetCalls(), be.GetRequests(), be.GetRateLimited(), be.GetRetries())
		if n := be.GetBatchApiBatches(); n > 0 { // the batch API's traffic, apart from the online calls
			fmt.Fprintf(b, " batch_api_batches=%d batch_api_requests=%d", n, be.GetBatchApiRequests())
		}
		if be.GetStreamed() > 0 || be.GetStreaming() > 0 { // streamed answers, each its own upstream call
			fmt.Fprintf(b, " streaming=%d streamed=%d", be.GetStreaming(), be.GetStreamed())
		}
		b.WriteByte('\n')
	}
	if js := s.GetJobs(); len(js) > 0 {
		fmt.Fprintf(b, "JOBS\n")
		for _, j := range js {
			// JobStats.done is the succeeded count (admin.proto), from
			// servers old and new; done here is every item that ended, as
			// in batcherctl jobs. failed includes the cancelled and the
			// expired items, shown apart (servers before them send 0).
			// Tab-separated as in batcherctl jobs list, so that a job
			// without a name leaves an empty column, not "id\t state".
			fmt.Fprintf(b, "  %s\t%s\t%s %d/%d done, %d succeeded, %d failed", j.GetId(), j.GetName(), j.GetState(),
				j.GetDone()+j.GetFailed(), j.GetTotal(), j.GetDone(), j.GetFailed()-j.GetCancelled()-j.GetExpired())
			if n := j.GetCancelled(); n > 0 {
				fmt.Fprintf(b, ", %d cancelled", n)
			}
			if n := j.GetExpired(); n > 0 {
				fmt.Fprintf(b, ", %d expired", n)
			}
			fmt.Fprintf(b, ", %.1f items/s, eta %s", j.GetItemsPerSecond(), j.GetEta().AsDuration().Round(time.Second))
			if j.GetCostUsd() != 0 || j.GetSavingUsd() != 0 {
				fmt.Fprintf(b, ", cost $%.4f, saved $%.4f", j.GetCostUsd(), j.GetSavingUsd())
			}
			b.WriteByte('\n')
		}
	}
}
