package telemetry

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batcherhq/batcher/batcher"
)

// Defaults of the sampler.
const (
	// DefaultSampleInterval is how often the sampler takes a Snapshot.
	DefaultSampleInterval = time.Second
	// DefaultHistory is how many snapshots it keeps: ten minutes at the
	// default interval, for the status page's charts.
	DefaultHistory = 600
)

// The durations go out in seconds, as JSON numbers, under names that say
// so: a dashboard should not have to know Go's nanoseconds.

// Sources are what the sampler reads. Lanes and Backends are required;
// the rest may be nil.
type Sources struct {
	Lanes    func() []batcher.LaneStats
	Backends func() []batcher.BackendStats
	// Limits returns a backend's configured limits
	// (batcher.Batcher.BackendLimits).
	Limits func(name string) (maxConcurrency, rpm, tpm int)
	// Streams returns the server's stream figures.
	Streams func() Streams
	// Jobs returns every job's counts. The hook for the jobs service: nil
	// until it exists, and the jobs list stays empty.
	Jobs func() []Job
	// JobStates are the values of Job.State that batcher.jobs is labelled
	// by (RegisterLive): batcherd passes every jobs.State's name.
	JobStates []string
	// Metrics, when set, gives the request counts, rates and latencies
	// (from the core's instruments) and the budgets spent: the Prometheus
	// registry the exposition serves (Telemetry.Gatherer), so that the
	// live views read the same aggregation and cost the hot path no
	// second reader.
	Metrics prometheus.Gatherer
	// Fleet returns the fleet's view; nil (the source, or its answer) when
	// the service runs alone.
	Fleet func() *Fleet
	// Cache returns the response cache's counts; nil without a cache.
	Cache func() []CacheRoute
}

// Sampler takes a Snapshot every interval and keeps the last ones.
// Start it once; Stop it before the sources go away.
type Sampler struct {
	src      Sources
	interval time.Duration
	keep     int

	mu      sync.Mutex
	history []Snapshot // oldest first
	raw     []rawSample
	seq     uint64
	changed chan struct{} // closed and replaced at each new snapshot

	stop    chan struct{}
	done    chan struct{}
	started atomic.Bool // Start ran: Stop waits for its goroutine
}

// rawSample holds the cumulative values a snapshot's rates derive from.
type rawSample struct {
	t          time.Time
	completed  int64
	tokens     int64
	latency    []uint64 // bucket counts of batcher.request.duration
	bounds     []float64
	budgetReqs map[string]int64
	budgetToks map[string]int64
	jobDone    map[string]int64
	jobTokens  map[string]int64
}

// NewSampler returns a sampler of src every interval (DefaultSampleInterval
// when not positive) keeping keep snapshots (DefaultHistory when not
// positive).
func NewSampler(src Sources, interval time.Duration, keep int) *Sampler {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	if keep <= 0 {
		keep = DefaultHistory
	}
	return &Sampler{src: src, interval: interval, keep: keep, changed: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Interval returns the sampling interval.
func (s *Sampler) Interval() time.Duration { return s.interval }

// Start takes a first snapshot now and then one every interval until Stop.
func (s *Sampler) Start() {
	if !s.started.CompareAndSwap(false, true) {
		return
	}
	s.Sample(time.Now())
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				s.Sample(now)
			case <-s.stop:
				return
			}
		}
	}()
}

// Stop stops the sampler's goroutine, if Start started one, and ends the
// waits of Next. Snapshots already taken stay readable. Stop is
// idempotent; call it from one goroutine.
func (s *Sampler) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
		if !s.started.CompareAndSwap(false, true) { // a Start after Stop starts nothing
			<-s.done
		}
	}
}

// Latest returns the newest snapshot and its sequence number (0: none yet).
func (s *Sampler) Latest() (Snapshot, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.history) == 0 {
		return Snapshot{}, 0
	}
	return s.history[len(s.history)-1], s.seq
}

// History returns the snapshots kept, oldest first.
func (s *Sampler) History() []Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history)
}

// Next waits for a snapshot newer than seq, or for ctx or the sampler's
// Stop, and returns it with its sequence number.
func (s *Sampler) Next(ctx context.Context, seq uint64) (Snapshot, uint64, error) {
	for {
		s.mu.Lock()
		if s.seq > seq && len(s.history) > 0 {
			snap, n := s.history[len(s.history)-1], s.seq
			s.mu.Unlock()
			return snap, n, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Snapshot{}, seq, ctx.Err()
		case <-s.stop:
			return Snapshot{}, seq, errStopped
		}
	}
}

// Stopped is closed once Stop was called.
func (s *Sampler) Stopped() <-chan struct{} { return s.stop }

var errStopped = context.Canceled

// Sample takes a snapshot at now and keeps it.
func (s *Sampler) Sample(now time.Time) Snapshot {
	// The lists are empty, never null, in the JSON dashboards read: a
	// reader iterating lanes would fail on an idle batcherd.
	snap := Snapshot{Time: now, Lanes: []Lane{}, Backends: []Backend{}, Jobs: []Job{}}
	for _, l := range s.src.Lanes() {
		snap.Lanes = append(snap.Lanes, Lane{Name: l.Name, Route: l.Route, Backend: l.Backend, Queued: l.Queued, InFlight: l.InFlight})
	}
	slices.SortFunc(snap.Lanes, func(a, b Lane) int {
		if a.Route != b.Route {
			return cmpString(a.Route, b.Route)
		}
		return cmpString(a.Name, b.Name)
	})
	for _, st := range s.src.Backends() {
		be := Backend{Name: st.Name, Breaker: st.Breaker.String(), InFlight: st.InFlight, Limit: st.Limit,
			RPMLimit: st.RPM, TPMLimit: st.TPM, Calls: st.Calls, Items: st.Items, RateLimited: st.RateLimited,
			Fallbacks: st.Fallbacks, DedupHits: st.DedupHits, Streaming: st.Streaming, Streamed: st.Streamed}
		for _, n := range st.Retries {
			be.Retries += n
		}
		if s.src.Limits != nil {
			be.MaxConcurrency, be.RPMMax, be.TPMMax = s.src.Limits(st.Name)
		}
		if be.RPMMax == 0 {
			be.RPMLimit = 0
		}
		if be.TPMMax == 0 {
			be.TPMLimit = 0
		}
		snap.Backends = append(snap.Backends, be)
	}
	if s.src.Streams != nil {
		snap.Streams = s.src.Streams()
	}
	if s.src.Jobs != nil {
		if js := s.src.Jobs(); js != nil {
			snap.Jobs = js
		}
	}
	if s.src.Fleet != nil {
		snap.Fleet = s.src.Fleet()
	}
	if s.src.Cache != nil {
		snap.Cache = s.src.Cache()
	}
	raw := rawSample{t: now, budgetReqs: map[string]int64{}, budgetToks: map[string]int64{},
		jobDone: map[string]int64{}, jobTokens: map[string]int64{}}
	for _, j := range snap.Jobs {
		raw.jobDone[j.ID], raw.jobTokens[j.ID] = j.Done(), j.Tokens
	}
	if s.src.Metrics != nil {
		s.readMetrics(&snap, &raw)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.derive(&snap, &raw)
	s.history = append(s.history, snap)
	s.raw = append(s.raw, raw)
	if len(s.history) > s.keep {
		s.history = slices.Delete(s.history, 0, len(s.history)-s.keep)
		s.raw = slices.Delete(s.raw, 0, len(s.raw)-s.keep)
	}
	s.seq++
	close(s.changed)
	s.changed = make(chan struct{})
	return snap
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
