package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"go.opentelemetry.io/otel/metric"
)

// Core is what the jobs need of the core: *batcher.Batcher.
type Core interface {
	// TrySubmit, not Submit: a task the core cannot take now waits in the
	// run's backlog, so its refusal is no rejection.
	TrySubmit(ctx context.Context, req *batcher.Request) (*batcher.Call, error)
	// FlushCalls sends the given calls still queued without waiting out
	// their delay: a job's last requests (run_tail.go).
	FlushCalls(ctx context.Context, calls ...*batcher.Call) error
	Routes() []batcher.RouteInfo
	AgingStep() time.Duration
}

// Defaults of Config.
const (
	DefaultMaxItems           = 2_000_000
	DefaultMaxRunning         = 4
	DefaultMaxInFlight        = 4096
	DefaultConcurrentRequests = 1024
	DefaultLease              = 30 * time.Second
	DefaultTTL                = 7 * 24 * time.Hour
	DefaultCommitInterval     = 25 * time.Millisecond
	DefaultCommitSize         = 1024
	DefaultPollInterval       = time.Second
	// MaxGroupRuns bounds a group's runs, MaxGroups a job's groups.
	MaxGroupRuns = 100
	MaxGroups    = 32
)

// Config configures a Manager. Zero fields take their defaults.
type Config struct {
	Store Store
	Core  Core
	// DataDir holds each job's output directory (JobDir).
	DataDir string
	// OutputRoot, when set, lets a spec choose its output directory
	// (Spec.OutputDir) under it; empty: specs may not choose.
	OutputRoot string
	// Owner names this process in leases; default a random id.
	Owner string
	// Exclusive says the store is this process's alone (SQLite): at Start,
	// every claim a previous run left goes back to pending at once.
	Exclusive bool
	// Lease is how long a claim holds without renewal. Default
	// DefaultLease.
	Lease time.Duration
	// MaxItems bounds a job's inputs. Default DefaultMaxItems.
	MaxItems int64
	// MaxRunning bounds the jobs this process runs at once; others wait
	// QUEUED. Default DefaultMaxRunning.
	MaxRunning int
	// MaxInFlight bounds the tasks of all jobs in flight in this process,
	// shared evenly between the running jobs. Default DefaultMaxInFlight.
	MaxInFlight int
	// ConcurrentRequests is a job's bound when its spec sets none.
	// Default DefaultConcurrentRequests.
	ConcurrentRequests int
	// QueueTarget is how long a job's requests may wait in the core's
	// queue before the job admits fewer: each job sizes its requests in
	// flight to what the backends serve within it (AIMD on the queue wait,
	// between ConcurrentRequests and minWindow). Set it to half the core's
	// aging step, so that a job's backlog never ages past fresh URGENT
	// work. Default: half of Core.AgingStep(); a job's requests that wait
	// longer than an aging step in the core's queue outrank fresh URGENT
	// work there, so a job keeps its backlog below.
	QueueTarget time.Duration
	// TTL is how long an ended job is kept; negative: forever. Default
	// DefaultTTL.
	TTL time.Duration
	// CommitInterval and CommitSize bound how long and how many results
	// wait for their group commit.
	CommitInterval time.Duration
	CommitSize     int
	// PollInterval is how often the manager looks for work and a running
	// job for changes other processes made.
	PollInterval time.Duration
	// BatchRoutes are the routes whose provider batch API jobs may choose
	// (Spec.Dispatch), by route name.
	BatchRoutes map[string]BatchRoute
	// BatchHook, when set, is called before and after each upstream step
	// of a batch-API dispatch (claimed, uploading, uploaded, created,
	// polling, collected); returning true stops that dispatch on the spot,
	// recording nothing more, as a kill would. For tests.
	BatchHook func(jobID string, chunk int, step string) bool
	// Prices are the routes' price tables, by route name: a task's cost,
	// its job's, and batcher_cost_total. A route without one costs nothing.
	Prices map[string]Price
	// MeterProvider is where batcher_cost_total, batcher_upstream_twins_total
	// and batcher_upstream_batch_api_{batches,requests}_total are recorded;
	// nil: nowhere.
	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
}

func (c *Config) resolve() error {
	if c.Store == nil || c.Core == nil {
		return errors.New("jobs: Config.Store and Config.Core are required")
	}
	if c.DataDir == "" {
		return errors.New("jobs: Config.DataDir is required")
	}
	if c.Owner == "" {
		c.Owner = newID("owner_")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxItems == 0 {
		c.MaxItems = DefaultMaxItems
	}
	def(&c.MaxRunning, DefaultMaxRunning)
	def(&c.MaxInFlight, DefaultMaxInFlight)
	def(&c.ConcurrentRequests, DefaultConcurrentRequests)
	def(&c.CommitSize, DefaultCommitSize)
	defD(&c.Lease, DefaultLease)
	defD(&c.TTL, DefaultTTL)
	defD(&c.CommitInterval, DefaultCommitInterval)
	defD(&c.PollInterval, DefaultPollInterval)
	defD(&c.QueueTarget, c.Core.AgingStep()/2)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.MaxItems < 1:
		return fmt.Errorf("jobs: max items: must be positive, got %d", c.MaxItems)
	case c.MaxRunning < 1, c.MaxInFlight < 1, c.ConcurrentRequests < 1, c.CommitSize < 1:
		return fmt.Errorf("jobs: max running, max in flight, concurrent requests and commit size must be positive")
	case c.Lease < time.Second:
		return fmt.Errorf("jobs: lease: at least 1s, got %v", c.Lease)
	}
	for route, p := range c.Prices {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("jobs: prices: route %q: %w", route, err)
		}
	}
	return nil
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
