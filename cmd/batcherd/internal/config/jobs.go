package config

import (
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/jobs"
)

// The job stores.
const (
	JobStoreSQLite   = "sqlite"
	JobStorePostgres = "postgres"
)

// Jobs configures durable batch jobs. Its fields sit at the top level of the
// YAML file (data_dir, job_store, postgres_dsn) beside a jobs: section of
// limits.
//
// Jobs are off until data_dir is set: it holds the SQLite store and every
// job's output files (with PostgreSQL, the files only).
type Jobs struct {
	// DataDir is where jobs live; empty: jobs off.
	DataDir string `yaml:"data_dir"`
	// JobStore is sqlite (the default, in DataDir) or postgres.
	JobStore string `yaml:"job_store"`
	// PostgresDSN is the PostgreSQL connection string for job_store
	// postgres. It may hold a password: it is never logged.
	PostgresDSN string     `yaml:"postgres_dsn"`
	Limits      JobsLimits `yaml:"jobs"`
}

// JobsLimits bounds jobs. Default() holds the jobs package's defaults;
// 0 takes them too.
type JobsLimits struct {
	// MaxItems bounds one job's items (default 2,000,000).
	MaxItems int64 `yaml:"max_items"`
	// MaxRunning bounds the jobs one batcherd runs at once (default 4).
	MaxRunning int `yaml:"max_running"`
	// MaxInFlight bounds the items of all jobs in flight (default 4096).
	MaxInFlight int `yaml:"max_in_flight"`
	// ConcurrentRequests is a job's in-flight bound when its spec sets
	// none (default 1024).
	ConcurrentRequests int `yaml:"concurrent_requests"`
	// TTL is how long an ended job is kept (default 168h; negative:
	// forever).
	TTL Duration `yaml:"ttl"`
	// Lease is how long a replica's claim holds without renewal (default
	// 30s): a dead replica's items go back to pending after it.
	Lease Duration `yaml:"lease"`
	// OutputRoot, when set, lets a job choose where its output files go
	// (JobSpec.output_dir), in a directory under this one; empty: every
	// job writes under data_dir.
	OutputRoot string `yaml:"output_root"`
}

func init() {
	settings = append(settings,
		setting{"data_dir", "data-dir", "BATCHER_DATA_DIR", "directory of the job store and the jobs' output files (empty: jobs off)", func(c *Config, v string) error { c.Jobs.DataDir = v; return nil }},
		setting{"job_store", "job-store", "BATCHER_JOB_STORE", "job store: sqlite (in data_dir) or postgres", func(c *Config, v string) error { c.Jobs.JobStore = strings.TrimSpace(v); return nil }},
		setting{"postgres_dsn", "postgres-dsn", "BATCHER_POSTGRES_DSN", "PostgreSQL connection string for job_store postgres", func(c *Config, v string) error { c.Jobs.PostgresDSN = v; return nil }},
		setting{"jobs.max_items", "jobs-max-items", "BATCHER_JOBS_MAX_ITEMS", "items one job may hold", func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return err
			}
			c.Jobs.Limits.MaxItems = n
			return nil
		}},
		setting{"jobs.max_running", "jobs-max-running", "BATCHER_JOBS_MAX_RUNNING", "jobs one batcherd runs at once", intSetter(func(c *Config) *int { return &c.Jobs.Limits.MaxRunning })},
		setting{"jobs.ttl", "jobs-ttl", "BATCHER_JOBS_TTL", "how long an ended job is kept", durSetter(func(c *Config) *Duration { return &c.Jobs.Limits.TTL })},
		setting{"jobs.output_root", "jobs-output-root", "BATCHER_JOBS_OUTPUT_ROOT", "directory under which a job may choose its output directory (empty: none may)", func(c *Config, v string) error { c.Jobs.Limits.OutputRoot = v; return nil }},
		setting{"jobs.lease", "jobs-lease", "BATCHER_JOBS_LEASE", "how long a claim holds without renewal", durSetter(func(c *Config) *Duration { return &c.Jobs.Limits.Lease })},
	)
}

// defaultJobsLimits are the jobs package's defaults, so that --help and a
// dump of the configuration show what runs.
func defaultJobsLimits() JobsLimits {
	return JobsLimits{MaxItems: jobs.DefaultMaxItems, MaxRunning: jobs.DefaultMaxRunning, MaxInFlight: jobs.DefaultMaxInFlight,
		ConcurrentRequests: jobs.DefaultConcurrentRequests, TTL: Duration(jobs.DefaultTTL), Lease: Duration(jobs.DefaultLease)}
}

// jobsDefaultString returns a jobs setting's value for the flags' usage.
func jobsDefaultString(c *Config, path string) string {
	j := &c.Jobs
	switch path {
	case "data_dir":
		return j.DataDir
	case "job_store":
		return j.JobStore
	case "postgres_dsn":
		return "" // may hold a password
	case "jobs.max_items":
		return strconv.FormatInt(j.Limits.MaxItems, 10)
	case "jobs.max_running":
		return strconv.Itoa(j.Limits.MaxRunning)
	case "jobs.ttl":
		return j.Limits.TTL.String()
	case "jobs.lease":
		return j.Limits.Lease.String()
	}
	return ""
}

// validateJobs adds the jobs section's errors to e.
func (c *Config) validateJobs(e *errs) {
	j := &c.Jobs
	switch j.JobStore {
	case "", JobStoreSQLite:
	case JobStorePostgres:
		if j.PostgresDSN == "" {
			e.add("postgres_dsn", "must be set for job_store postgres (or BATCHER_POSTGRES_DSN)")
		}
		if j.DataDir == "" {
			e.add("data_dir", "must be set for job_store postgres: the jobs' output files go there")
		}
	default:
		e.add("job_store", "must be sqlite or postgres, got %q", j.JobStore)
	}
	l := &j.Limits
	if l.MaxItems < 0 {
		e.add("jobs.max_items", "must not be negative, got %d", l.MaxItems)
	}
	if l.MaxRunning < 0 {
		e.add("jobs.max_running", "must not be negative, got %d", l.MaxRunning)
	}
	if l.MaxInFlight < 0 {
		e.add("jobs.max_in_flight", "must not be negative, got %d", l.MaxInFlight)
	}
	if l.ConcurrentRequests < 0 {
		e.add("jobs.concurrent_requests", "must not be negative, got %d", l.ConcurrentRequests)
	}
	if l.OutputRoot != "" && j.DataDir == "" {
		e.add("jobs.output_root", "needs data_dir: jobs are off without it")
	}
	if l.Lease != 0 && l.Lease.D() < 1e9 {
		e.add("jobs.lease", "must be at least 1s, got %v", l.Lease)
	}
}
