package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"go.opentelemetry.io/otel/metric"
)

// Core is what the jobs need of the core: *batcher.Batcher.
type Core interface {
	// TrySubmit, not Submit: a task the core cannot take now waits in the
	// run's backlog, so its refusal is no rejection.
	TrySubmit(ctx context.Context, req *batcher.Request) (*batcher.Call, error)
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

// Manager creates jobs and runs them: it looks for jobs to run, claims
// their tasks in chunks, submits them to the core, records results in
// groups and writes the output files. Several managers (processes) may share
// a PostgreSQL store and run one job together.
type Manager struct {
	cfg Config
	// routes are the core's, by name; replaced whole by RoutesChanged.
	routes atomic.Pointer[map[string]batcher.RouteInfo]

	mu       sync.Mutex
	runs     map[string]*run
	changed  map[string]chan struct{} // closed and replaced on a state change
	trackers map[string]*rateTracker

	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	// stopping ends when Shutdown begins: the runs stop claiming. runsCtx,
	// the parent of every run's context, ends when Shutdown's context
	// does first (killRuns): the runs stop waiting on the store and return.
	stopping context.Context
	stopWork context.CancelFunc
	runsCtx  context.Context
	killRuns context.CancelFunc
	loopDone chan struct{}
	wg       sync.WaitGroup // runs
	counts   *jobMetrics
	twins    *twinMetric                      // upstream batches created twice (twins.go)
	batchAPI *batchAPIMetric                  // upstream batches created and their requests (batchapi_metric.go)
	prices   atomic.Pointer[map[string]Price] // replaced whole by SetPrices
	budgets  budgets                          // the routes' enqueued tokens upstream (budget.go)
}

// New returns a Manager; Start sets it going.
func New(cfg Config) (*Manager, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, runs: map[string]*run{},
		changed: map[string]chan struct{}{}, trackers: map[string]*rateTracker{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), loopDone: make(chan struct{})}
	m.stopping, m.stopWork = context.WithCancel(context.Background())
	m.runsCtx, m.killRuns = context.WithCancel(context.Background())
	counts, err := newJobMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("jobs: metrics: %w", err)
	}
	m.counts = counts
	if m.twins, err = newTwinMetric(cfg.MeterProvider); err != nil {
		return nil, fmt.Errorf("jobs: metrics: %w", err)
	}
	if m.batchAPI, err = newBatchAPIMetric(cfg.MeterProvider); err != nil {
		return nil, fmt.Errorf("jobs: metrics: %w", err)
	}
	prices := cfg.Prices
	m.prices.Store(&prices)
	m.RoutesChanged()
	return m, nil
}

// RoutesChanged reads the core's routes again: call it after changing them
// (batcher.Batcher.SetRoutes), so that new jobs and items are checked
// against the routes in force. Items of jobs already created that name a
// removed route fail as the core refuses them.
func (m *Manager) RoutesChanged() {
	routes := map[string]batcher.RouteInfo{}
	for _, r := range m.cfg.Core.Routes() {
		routes[r.Name] = r
	}
	m.routes.Store(&routes)
}

// SetPrices replaces the routes' price tables (Config.Prices): tasks that
// end from now on cost at the new prices. It refuses a bad table, naming
// its route and field, and keeps the old ones.
func (m *Manager) SetPrices(prices map[string]Price) error {
	for route, p := range prices {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("jobs: prices: route %q: %w", route, err)
		}
	}
	m.prices.Store(&prices)
	return nil
}

// route returns the operation of the named route, and whether it exists.
func (m *Manager) route(name string) (batcher.Operation, bool) {
	ri, ok := m.routeInfo(name)
	return ri.Op, ok
}

// routeInfo returns the named route, and whether it exists.
func (m *Manager) routeInfo(name string) (batcher.RouteInfo, bool) {
	ri, ok := (*m.routes.Load())[name]
	return ri, ok
}

// defaultMaxTokens is the named route's max_tokens for requests that set
// none (0 for an unknown route).
func (m *Manager) defaultMaxTokens(name string) int32 {
	return (*m.routes.Load())[name].DefaultMaxTokens
}

// Start resumes the jobs the store holds and starts looking for work. With
// Exclusive, claims a previous run of this process left go back first.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("jobs: data directory %s: %w", m.cfg.DataDir, err)
	}
	if m.cfg.Exclusive {
		n, err := m.cfg.Store.Release(ctx, "", time.Now().Add(100*365*24*time.Hour))
		if err != nil {
			return fmt.Errorf("jobs: returning the previous run's claims: %w", err)
		}
		if n > 0 {
			m.cfg.Logger.Info("jobs: resumed claims left by the previous run", "tasks", n)
		}
		// A job still VALIDATING was being created when the process died:
		// its caller got no answer, so it is dropped.
		orphans, err := m.cfg.Store.ListJobs(ctx, "", StateValidating, "", 1000)
		if err != nil {
			return fmt.Errorf("jobs: looking for jobs left half-created: %w", err)
		}
		for _, j := range orphans {
			if err := m.cfg.Store.DeleteJob(ctx, j.ID); err != nil && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("jobs: removing the half-created job %s: %w", j.ID, err)
			}
		}
	} else {
		if lv, ok := m.cfg.Store.(Liveness); ok {
			// Alive from now on; the claims of owners that are not (this
			// process's previous life, a crashed replica) go back at once,
			// not when their leases end.
			if err := lv.Live(ctx, m.cfg.Owner); err != nil {
				return err
			}
			m.releaseDead(ctx)
		}
		if err := m.dropAbandoned(ctx); err != nil {
			return err
		}
	}
	go m.loop()
	return nil
}

// releaseDead returns the claims of dead owners to pending, on a store
// that knows who is alive (Liveness).
func (m *Manager) releaseDead(ctx context.Context) {
	lv, ok := m.cfg.Store.(Liveness)
	if !ok || m.cfg.Exclusive {
		return
	}
	n, err := lv.ReleaseDead(ctx, m.cfg.Owner)
	if err != nil && ctx.Err() == nil {
		m.cfg.Logger.Error("jobs: taking over the claims of dead owners", "err", err)
	}
	if n > 0 {
		m.cfg.Logger.Info("jobs: took over the claims of a process that died", "tasks", n)
		m.nudge()
	}
}

// dropAbandoned removes the jobs left VALIDATING by a creator that died:
// those no process holds (Store.Hold) and created over a lease ago. On a
// shared store the creator may be another process, alive: its lease tells.
func (m *Manager) dropAbandoned(ctx context.Context) error {
	ids, err := m.cfg.Store.Abandoned(ctx, time.Now().Add(-m.cfg.Lease), 1000)
	if err != nil {
		return fmt.Errorf("jobs: looking for jobs left half-created: %w", err)
	}
	for _, id := range ids {
		if err := m.cfg.Store.DeleteJob(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("jobs: removing the half-created job %s: %w", id, err)
		}
		m.cfg.Logger.Info("jobs: removed a job its creator left half-created", "job", id)
	}
	return nil
}

// Shutdown stops claiming, lets in-flight tasks finish and be recorded
// until ctx ends, and returns the remaining claims to pending. Run it before
// the core's shutdown, so that in-flight tasks can finish.
//
// When ctx ends first, the runs return at once: their requests in flight
// are cancelled and their store calls abandoned (within 5s more), and
// what they did not record runs again at the next start.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.stopOnce.Do(func() {
		close(m.stop)
		m.stopWork()
	})
	done := make(chan struct{})
	go func() {
		<-m.loopDone
		m.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("jobs: drain ended with tasks in flight (they run again at restart): %w", ctx.Err())
		m.killRuns()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		select {
		case <-done:
		case <-wctx.Done():
			err = errors.Join(err, errors.New("jobs: a run did not return within 5s of the drain's end"))
		}
		cancel()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, rerr := m.cfg.Store.Release(rctx, m.cfg.Owner, time.Now()); rerr != nil {
		err = errors.Join(err, fmt.Errorf("jobs: returning claims: %w", rerr))
	}
	return err
}

func (m *Manager) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// notify wakes the watchers of a job.
func (m *Manager) notify(id string) {
	m.mu.Lock()
	if ch := m.changed[id]; ch != nil {
		close(ch)
		delete(m.changed, id)
	}
	m.mu.Unlock()
}

func (m *Manager) changes(id string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.changed[id]
	if ch == nil {
		ch = make(chan struct{})
		m.changed[id] = ch
	}
	return ch
}

func (m *Manager) tracker(id string) *rateTracker {
	m.mu.Lock()
	defer m.mu.Unlock()
	tr := m.trackers[id]
	if tr == nil {
		tr = &rateTracker{window: DefaultRateWindow}
		m.trackers[id] = tr
	}
	return tr
}

// loop looks for jobs to run, renews leases, takes over expired ones and
// removes ended jobs past their TTL.
func (m *Manager) loop() {
	defer close(m.loopDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stop
		cancel()
	}()
	poll := time.NewTicker(m.cfg.PollInterval)
	defer poll.Stop()
	lease := time.NewTicker(m.cfg.Lease / 3)
	defer lease.Stop()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	m.schedule(ctx)
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-poll.C:
			m.releaseDead(ctx)
		case <-lease.C:
			if err := m.cfg.Store.Extend(ctx, m.cfg.Owner, m.cfg.Lease); err != nil && ctx.Err() == nil {
				m.cfg.Logger.Error("jobs: renewing leases", "err", err)
			}
			if !m.cfg.Exclusive {
				if n, err := m.cfg.Store.Release(ctx, "", time.Now()); err != nil && ctx.Err() == nil {
					m.cfg.Logger.Error("jobs: taking over expired leases", "err", err)
				} else if n > 0 {
					m.cfg.Logger.Info("jobs: took over tasks whose lease ended", "tasks", n)
				}
			}
			continue
		case <-sweep.C:
			m.sweep(ctx)
			continue
		}
		m.schedule(ctx)
	}
}

// schedule starts runs for the jobs that need one here.
func (m *Manager) schedule(ctx context.Context) {
	for _, st := range []State{StateCancelling, StateFinalizing, StateRunning, StateQueued} {
		js, err := m.cfg.Store.ListJobs(ctx, "", st, "", 100)
		if err != nil {
			if ctx.Err() == nil {
				m.cfg.Logger.Error("jobs: looking for work", "err", err)
			}
			return
		}
		// Oldest first.
		for i := len(js) - 1; i >= 0; i-- {
			j := js[i]
			m.mu.Lock()
			_, running := m.runs[j.ID]
			busy := len(m.runs) >= m.cfg.MaxRunning && (st == StateRunning || st == StateQueued)
			if running || busy {
				m.mu.Unlock()
				continue
			}
			select {
			case <-m.stop:
				m.mu.Unlock()
				return
			default:
			}
			r := newRun(m, j)
			m.runs[j.ID] = r
			m.wg.Add(1)
			m.mu.Unlock()
			go r.loop()
		}
	}
}

// share returns the in-flight bound of one of the running jobs.
func (m *Manager) share() int {
	m.mu.Lock()
	n := max(len(m.runs), 1)
	m.mu.Unlock()
	return max(m.cfg.MaxInFlight/n, 1)
}

func (m *Manager) removeRun(id string) {
	m.mu.Lock()
	delete(m.runs, id)
	m.mu.Unlock()
	m.wg.Done()
	m.nudge()
}

func (m *Manager) sweep(ctx context.Context) {
	if !m.cfg.Exclusive {
		if err := m.dropAbandoned(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Error("jobs: sweeping", "err", err)
		}
	}
	if m.cfg.TTL < 0 {
		return
	}
	for _, st := range []State{StateCompleted, StateFailed, StateCancelled, StateExpired} {
		js, err := m.cfg.Store.ListJobs(ctx, "", st, "", 1000)
		if err != nil {
			return
		}
		for _, j := range js {
			if !j.EndedAt.IsZero() && time.Since(j.EndedAt) > m.cfg.TTL {
				if err := m.Delete(ctx, j.ID); err != nil && ctx.Err() == nil {
					m.cfg.Logger.Error("jobs: removing an expired job", "job", j.ID, "err", err)
				}
			}
		}
	}
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Get returns a job. Every method that names a job answers ErrNotFound,
// as for an unknown id, when ctx's tenant (WithTenant) is not the job's.
func (m *Manager) Get(ctx context.Context, id string) (*Job, error) {
	j, err := m.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return nil, err
	}
	return visible(ctx, j)
}

// List returns a page of jobs, newest first: ctx's tenant's only.
func (m *Manager) List(ctx context.Context, state State, after string, limit int) ([]*Job, error) {
	t, _ := tenantOf(ctx)
	return m.cfg.Store.ListJobs(ctx, t.Name, state, after, limit)
}

// Progress returns a job's progress.
func (m *Manager) Progress(ctx context.Context, id string) (Progress, *Job, error) {
	j, err := m.Get(ctx, id)
	if err != nil {
		return Progress{}, nil, err
	}
	p := m.ProgressOf(j)
	if j.Spec.Dispatch == DispatchBatchAPI || j.Spec.Dispatch == DispatchAuto {
		if cs, ok := m.cfg.Store.(ChunkStore); ok {
			chunks, err := cs.Chunks(ctx, id)
			if err != nil {
				return Progress{}, nil, err
			}
			if p.Upstream = upstreamProgress(chunks, p.Time); p.Upstream != nil && !j.State.Terminal() {
				if e := p.Upstream.ETA; e >= 0 && (p.ETA < 0 || e > p.ETA) {
					p.ETA = e // the job cannot end before its upstream batches do
				}
			}
		}
	}
	return p, j, nil
}

// ProgressOf returns the progress of a job read from the store (Get,
// List): its rates and ETA as GetJob reports them, over the same moving
// window.
func (m *Manager) ProgressOf(j *Job) Progress {
	return progressOf(j, m.tracker(j.ID), time.Now())
}

// Watch calls f with the job's progress at most once every interval (0: a
// second) and on every change of state, until the job is terminal (after
// reporting it), ctx ends or f fails.
func (m *Manager) Watch(ctx context.Context, id string, interval time.Duration, f func(Progress) error) error {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ch := m.changes(id)
		p, _, err := m.Progress(ctx, id)
		if err != nil {
			return err
		}
		if err := f(p); err != nil {
			return err
		}
		if p.State.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-ch:
		}
	}
}

// Cancel asks a job to end: queued tasks end cancelled, those in flight may
// finish, and the job ends CANCELLED.
func (m *Manager) Cancel(ctx context.Context, id string) (*Job, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return nil, err
	}
	err := m.cfg.Store.Transition(ctx, id, []State{StateValidating, StateQueued, StateRunning}, StateCancelling, "")
	if err != nil && !errors.Is(err, ErrConflict) {
		return nil, err
	}
	m.mu.Lock()
	r := m.runs[id]
	m.mu.Unlock()
	if r != nil {
		if err == nil {
			r.cancelWork() // a claim in progress stops now
		}
		r.poke()
	}
	m.notify(id)
	m.nudge()
	return m.cfg.Store.GetJob(ctx, id)
}

// Delete removes a job's rows and files, cancelling it first if it runs
// here.
func (m *Manager) Delete(ctx context.Context, id string) error {
	j, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	r := m.runs[id]
	m.mu.Unlock()
	if r != nil {
		r.abort()
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := m.cfg.Store.DeleteJob(ctx, id); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.trackers, id)
	m.mu.Unlock()
	m.notify(id)
	if err := m.removeOutput(j); err != nil {
		return fmt.Errorf("jobs: removing the files of %s: %w", id, err)
	}
	return nil
}

// Results returns up to n ended tasks of a job after seq after, in item
// order, only those in state when it is terminal.
func (m *Manager) Results(ctx context.Context, id string, after int64, state ItemState, n int) ([]Task, error) {
	if _, ok := tenantOf(ctx); ok {
		if _, err := m.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	return m.cfg.Store.Results(ctx, id, after, state, n)
}

// validateSpec checks a spec, naming the field at fault.
func (m *Manager) validateSpec(s *Spec) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if len(s.Name) > 256 {
		return bad("spec.name", "at most 256 bytes")
	}
	if field, reason := checkMetadata(s.Metadata); field != "" {
		return bad(field, "%s", reason)
	}
	if s.Model != "" {
		if _, ok := m.route(s.Model); !ok {
			return bad("spec.model", "unknown model %q", cut(s.Model))
		}
	}
	switch s.Priority {
	case batcher.PriorityNormal:
		s.Priority = batcher.PriorityDeferrable
	case batcher.PriorityLow, batcher.PriorityDeferrable:
	default:
		return bad("spec.priority", "must be LOW or DEFERRABLE, got %s", s.Priority)
	}
	if s.MaxRetries != nil && (*s.MaxRetries < 0 || *s.MaxRetries > 100) {
		return bad("spec.max_retries", "0 to 100, got %d", *s.MaxRetries)
	}
	if s.RetryDelay < 0 || s.RetryDelay > time.Hour {
		return bad("spec.retry_delay", "0 to 1h, got %v", s.RetryDelay)
	}
	if s.ConcurrentRequests < 0 || s.ConcurrentRequests > 100_000 {
		return bad("spec.concurrent_requests", "0 to 100000, got %d", s.ConcurrentRequests)
	}
	if s.CompletionWindow < 0 {
		return bad("spec.completion_window", "must not be negative, got %v", s.CompletionWindow)
	}
	if len(s.Groups) > MaxGroups {
		return bad("spec.run_groups", "at most %d", MaxGroups)
	}
	names := map[string]bool{}
	for i := range s.Groups {
		g := &s.Groups[i]
		field := fmt.Sprintf("spec.run_groups[%d]", i)
		if g.Name == "" {
			g.Name = fmt.Sprintf("group%d", i)
		}
		if names[g.Name] || g.Name == "judge" {
			return bad(field+".name", "%q used twice (or reserved)", cut(g.Name))
		}
		names[g.Name] = true
		if g.Runs == 0 {
			g.Runs = 1
		}
		if g.Runs < 0 || g.Runs > MaxGroupRuns {
			return bad(field+".runs", "1 to %d, got %d", MaxGroupRuns, g.Runs)
		}
		for _, mdl := range []string{g.Model, g.NextModel} {
			if _, ok := m.route(mdl); mdl != "" && !ok {
				return bad(field, "unknown model %q", cut(mdl))
			}
		}
		if t := g.Temperature; t != nil && (*t < 0 || *t > 2) {
			return bad(field+".temperature", "0 to 2, got %v", *t)
		}
		if g.Delay < 0 || g.Delay > time.Hour {
			return bad(field+".delay", "0 to 1h, got %v", g.Delay)
		}
		if g.MaxRetries != nil && (*g.MaxRetries < 0 || *g.MaxRetries > 100) {
			return bad(field+".max_retries", "0 to 100, got %d", *g.MaxRetries)
		}
		if g.RetryDelay < 0 || g.RetryDelay > time.Hour {
			return bad(field+".retry_delay", "0 to 1h, got %v", g.RetryDelay)
		}
		if f := g.BackoffFactor; f != 0 && !(f >= 1 && f <= batcher.MaxBackoffFactor) {
			return bad(field+".backoff_factor", "0 (the backend's) or 1 to %d, got %v", batcher.MaxBackoffFactor, f)
		}
	}
	if err := m.validateDispatch(s); err != nil {
		return err
	}
	if err := m.validateOutputDir(s.OutputDir); err != nil {
		return err
	}
	if s.RPM < 0 {
		return bad("spec.requests_per_minute", "must not be negative, got %d", s.RPM)
	}
	if s.TPM < 0 {
		return bad("spec.tokens_per_minute", "must not be negative, got %d", s.TPM)
	}
	if jd := s.Judge; jd != nil {
		if _, ok := m.route(jd.Model); !ok {
			return bad("spec.judge.model", "unknown model %q", cut(jd.Model))
		}
		if err := checkJudgeTemplate(s); err != nil {
			return bad("spec.judge.prompt_template", "%v", err)
		}
	}
	return nil
}
