package jobs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/batcherhq/batcher/batcher"
)

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
