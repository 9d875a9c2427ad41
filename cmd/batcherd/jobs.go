package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/server"
	"github.com/batcherhq/batcher/telemetry"
)

// jobsOffReason is what JobService answers, FAILED_PRECONDITION, while
// jobs are off.
const jobsOffReason = "jobs are off on this server: they need a data directory; start batcherd with --data-dir (data_dir in the config file, or BATCHER_DATA_DIR)"

// storeOpenTimeout bounds opening the job store at startup.
const storeOpenTimeout = 15 * time.Second

// startJobs opens the job store, resumes the jobs it holds and registers the
// JobService on gs. It returns the function that drains the jobs at
// shutdown, before the core's own drain, and the manager the batch API
// serves (nil with jobs off). The store itself is closed by late, after
// the telemetry has stopped: the status page and /metrics read the jobs
// through the drain, and the JobService's reads answer until the gRPC
// server stops. With no data directory, jobs are off and the
// JobService answers FAILED_PRECONDITION saying that jobs need --data-dir.
func startJobs(ctx context.Context, cfg *config.Config, built *config.Built, core *batcher.Batcher, gs *grpc.Server, mp metric.MeterProvider, log *slog.Logger, late *closers) (func(context.Context), *jobs.Manager, error) {
	jc := &cfg.Jobs
	if jc.DataDir == "" {
		log.Info("jobs off: set data_dir (--data-dir, BATCHER_DATA_DIR) to run batch jobs")
		server.NewJobsOff(jobsOffReason).Register(gs)
		return func(context.Context) {}, nil, nil
	}
	if err := checkWritable("data directory", jc.DataDir); err != nil {
		return nil, nil, err
	}
	if r := jc.Limits.OutputRoot; r != "" {
		if err := checkWritable("output root (jobs.output_root)", r); err != nil {
			return nil, nil, err
		}
	}
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	var (
		store jobs.Store
		err   error
	)
	kind := jc.JobStore
	if kind == "" {
		kind = config.JobStoreSQLite
	}
	switch kind {
	case config.JobStorePostgres:
		store, err = jobs.OpenPostgres(octx, jc.PostgresDSN)
	default:
		store, err = jobs.OpenSQLite(octx, jc.DataDir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("job store (%s): %w", kind, err)
	}
	l := &jc.Limits
	m, err := jobs.New(jobs.Config{
		Store: store, Core: core, DataDir: jc.DataDir, Exclusive: kind == config.JobStoreSQLite,
		MaxItems: l.MaxItems, MaxRunning: l.MaxRunning, MaxInFlight: l.MaxInFlight, ConcurrentRequests: l.ConcurrentRequests,
		TTL: l.TTL.D(), Lease: l.Lease.D(), Logger: log, OutputRoot: l.OutputRoot,
		BatchRoutes: batchRoutes(cfg, built), Prices: cfg.Prices(), MeterProvider: mp,
	})
	if err == nil {
		err = m.Start(ctx)
	}
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	server.NewJobService(m, log).WithScope(jobsScope).Register(gs)
	log.Info("jobs", "data_dir", jc.DataDir, "store", kind)
	late.add(func() {
		if err := store.Close(); err != nil {
			log.Error("closing the job store", "err", err)
		}
	})
	return func(ctx context.Context) {
		if err := m.Shutdown(ctx); err != nil {
			log.Error("jobs drain incomplete", "err", err)
		}
	}, m, nil
}

// checkWritable fails, naming what and dir, when batcherd cannot write
// there.
func checkWritable(what, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s %s: cannot create it: %w", what, dir, err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: not writable: %w", what, dir, errors.Unwrap(err))
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(filepath.Clean(name))
}

// jobsListLimit bounds the jobs the telemetry lists: the newest ones.
const jobsListLimit = 200

// jobsSource is the telemetry's view of m's jobs: the newest jobsListLimit,
// with their counts, states (among jobStateNames), cost and saving. A store
// error logs and lists none.
func jobsSource(m *jobs.Manager, log *slog.Logger) func() []telemetry.Job {
	return func() []telemetry.Job {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		js, err := m.List(ctx, jobs.ListQuery{Limit: jobsListLimit})
		if err != nil {
			log.Warn("listing jobs for telemetry", "err", err)
			return nil
		}
		out := make([]telemetry.Job, 0, len(js))
		for _, j := range js {
			c := j.Counts
			p := m.ProgressOf(j) // the rates and ETA GetJob reports
			out = append(out, telemetry.Job{
				ID: j.ID, Name: j.Spec.Name, State: j.State.String(),
				Total: c.Total, Succeeded: c.Succeeded, Failed: c.Failed + c.Cancelled + c.Expired,
				Cancelled: c.Cancelled, Expired: c.Expired,
				Tokens: j.TokensIn + j.TokensOut, Cost: p.Cost, Saving: p.Saving,
				ItemsPerSec: p.ItemsPerH / 3600, TokensPerSec: p.TokensPerS, ETA: max(p.ETA, 0),
			})
		}
		return out
	}
}

// jobStateNames are the names of every job state: the label values of
// batcher.jobs, from the jobs package itself so that none is missing.
func jobStateNames() []string {
	var out []string
	for _, s := range jobs.States() {
		out = append(out, s.String())
	}
	return out
}

// batchRoutes are the routes with batch_api set, over their backends'
// batch APIs (validated: OpenAI's batches, Anthropic's Message Batches).
func batchRoutes(cfg *config.Config, built *config.Built) map[string]jobs.BatchRoute {
	out := map[string]jobs.BatchRoute{}
	for _, r := range cfg.Routes {
		ba := r.BatchAPI
		if ba == nil {
			continue
		}
		var up batchapi.Upstream
		if be := built.OpenAI[r.Backend]; be != nil {
			up = be.Batches()
		} else if be := built.Anthropic[r.Backend]; be != nil {
			up = be.Batches()
		} else {
			continue
		}
		out[r.Name] = jobs.BatchRoute{Upstream: up, Model: cmp.Or(r.Model, r.Name), MaxRequests: ba.MaxRequests,
			MaxBytes: ba.MaxBytes, Gather: ba.Gather.D(), PollMin: ba.PollMin.D(), PollMax: ba.PollMax.D(),
			MaxEnqueuedTokens: ba.MaxEnqueuedTokens, CreateTimeout: ba.CreateTimeout.D()}
	}
	return out
}
