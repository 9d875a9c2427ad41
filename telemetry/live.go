package telemetry

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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

// Snapshot is the live state of batcherd at one moment: the data of the
// metrics, for the status page and WatchStats.
//
// Its JSON (the admin listener's /api/snapshot, /api/history and /events)
// is an API that dashboards read: names are snake_case and carry their
// unit where one applies (_seconds, _per_second, _per_minute); times are
// RFC 3339. The json tags below are that API; rename nothing without a
// reason.
type Snapshot struct {
	Time     time.Time `json:"time"`
	Lanes    []Lane    `json:"lanes"`
	Backends []Backend `json:"backends"`
	Streams  Streams   `json:"streams"`
	Jobs     []Job     `json:"jobs"`
	Requests Requests  `json:"requests"`
	// Fleet is the fleet this replica shares its budgets with; nil when it
	// runs alone.
	Fleet *Fleet `json:"fleet,omitempty"`
	// Cache is the response cache's counts by route; empty without one.
	Cache []CacheRoute `json:"cache,omitempty"`
}

// CacheRoute is one route's response cache counts (cumulative).
type CacheRoute struct {
	Route string `json:"route"`
	// HitRatio is the share of lookups answered from memory or Redis.
	HitRatio float64 `json:"hit_ratio"`
	// Hits and Misses in memory; RedisHits and RedisMisses of the
	// lookups memory missed, when Redis is behind it.
	Hits        int64 `json:"hits"`
	Misses      int64 `json:"misses"`
	RedisHits   int64 `json:"redis_hits"`
	RedisMisses int64 `json:"redis_misses"`
	Evictions   int64 `json:"evictions"`
	// Bytes held in memory.
	Bytes int64 `json:"bytes"`
}

// Fleet is the replicas that share the backends' budgets through Redis,
// as this replica last saw them.
type Fleet struct {
	Self string `json:"self"`
	// Redis answered the last heartbeat; false: each backend runs on its
	// local share (1/N of each budget).
	Redis    bool          `json:"redis"`
	Replicas []Replica     `json:"replicas"`
	Budgets  []FleetBudget `json:"budgets"`
}

// Replica is one replica of the fleet.
type Replica struct {
	ID   string            `json:"id"`
	Self bool              `json:"self"`
	Info map[string]string `json:"info"`
}

// FleetBudget is one backend's shared budget.
type FleetBudget struct {
	Backend string `json:"backend"`
	// Factor is the fleet's factor on configured rates (1: as configured).
	Factor float64 `json:"rate_factor"`
	// PausedUntil (a Retry-After) and OpenUntil (a replica's breaker);
	// zero: neither.
	PausedUntil time.Time `json:"paused_until"`
	OpenUntil   time.Time `json:"open_until"`
	// RPMLeft and TPMLeft are what the shared buckets hold now (negative:
	// booked ahead; 0 without a budget); RPMUsed and TPMUsed what the fleet
	// booked per minute lately.
	RPMLeft float64 `json:"requests_left"`
	TPMLeft float64 `json:"tokens_left"`
	RPMUsed float64 `json:"requests_per_minute_used"`
	TPMUsed float64 `json:"tokens_per_minute_used"`
	// Leases held now, by replica id.
	Leases map[string]int `json:"leases"`
}

// Lane is one lane's queue.
type Lane struct {
	Name    string `json:"name"`
	Route   string `json:"route"`
	Backend string `json:"backend"`
	// Queued by priority name: urgent, high, normal, low, deferrable.
	Queued   map[string]int `json:"queued"`
	InFlight int            `json:"in_flight"`
}

// Backend is one backend's limits, load and health.
type Backend struct {
	Name string `json:"name"`
	// Breaker is closed, open or half_open.
	Breaker string `json:"breaker"`
	// InFlight calls against the current (adaptive) Limit, and the
	// configured MaxConcurrency.
	InFlight       int `json:"in_flight"`
	Limit          int `json:"concurrency_limit"`
	MaxConcurrency int `json:"max_concurrency"`
	// RPMLimit and TPMLimit are the current (adaptive, AIMD) rates; RPMMax
	// and TPMMax the configured ones; 0: no such budget.
	RPMLimit float64 `json:"requests_per_minute_limit"`
	TPMLimit float64 `json:"tokens_per_minute_limit"`
	RPMMax   int     `json:"requests_per_minute_max"`
	TPMMax   int     `json:"tokens_per_minute_max"`
	// RPMUsed and TPMUsed are the requests and tokens spent over the last
	// minute (or since the start, scaled to a minute, when shorter).
	RPMUsed float64 `json:"requests_per_minute_used"`
	TPMUsed float64 `json:"tokens_per_minute_used"`
	// Cumulative counters: upstream calls, the requests they carried,
	// answers rate limited (429), retries, fallbacks, dedup hits.
	Calls       int64 `json:"calls"`
	Items       int64 `json:"requests"`
	RateLimited int64 `json:"rate_limited"`
	Retries     int64 `json:"retries"`
	Fallbacks   int64 `json:"fallbacks"`
	DedupHits   int64 `json:"dedup_hits"`
	// Streaming is the streamed requests being answered now (their
	// upstream calls open); Streamed counts them all.
	Streaming int   `json:"streaming"`
	Streamed  int64 `json:"streamed"`
	// BatchAPIBatches and BatchAPIRequests count the upstream batches jobs
	// created through the backend's batch API and the requests they
	// carried (cumulative, from the jobs' batcher_upstream_batch_api_*
	// series): traffic that Calls and Items, the online calls, leave out.
	BatchAPIBatches  int64 `json:"batch_api_batches"`
	BatchAPIRequests int64 `json:"batch_api_requests"`
}

// Streams are the server's open SubmitStreams and the messages they hold
// for sending.
type Streams struct {
	Open     int `json:"open"`
	Buffered int `json:"buffered_messages"`
}

// Job is one batch job's progress. Jobs sources fill the counts, and may
// fill the rates and the ETA (batcherd gives the job manager's, which
// GetJob reports); the sampler fills those a source left at zero from
// successive snapshots.
//
// Its counts are named as batcherctl names them: succeeded and failed
// items, and done every item that ended, the two together (the JSON's
// done; the method Done).
type Job struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// State is the job's state, as the jobs package names it (validating,
	// queued, running, finalizing, completed, failed, cancelling,
	// cancelled, expired).
	State string `json:"state"`
	Total int64  `json:"total"`
	// Succeeded items; Failed the items that ended otherwise: failed,
	// cancelled or expired. Of Failed, Cancelled were cancelled with the
	// job and Expired outlived its completion window; the rest failed of
	// their own.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
	Expired   int64 `json:"expired"`
	Tokens    int64 `json:"tokens"`
	// Cost is what the job cost so far in USD at its routes' prices, and
	// Saving what it saved against online dispatch of the same tokens
	// (the batch API's discount); 0 without prices (GetJob's cost_usd
	// and saving_usd).
	Cost   float64 `json:"cost_usd"`
	Saving float64 `json:"saving_usd"`
	// Rates over the last interval.
	ItemsPerSec  float64 `json:"items_per_second"`
	TokensPerSec float64 `json:"tokens_per_second"`
	// ETA is the time left at the current rate; 0 when unknown or done.
	// JSON: eta_seconds.
	ETA time.Duration `json:"-"`
}

// Done returns the items that ended: succeeded or not (what batcherctl
// calls done).
func (j Job) Done() int64 { return j.Succeeded + j.Failed }

// Requests are the service-wide request figures.
type Requests struct {
	// Cumulative counts.
	Admitted  int64 `json:"admitted"`
	Rejected  int64 `json:"rejected"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// Over the last interval: completions per second, tokens per second,
	// and the latency (admission to result) percentiles of the requests
	// that ended in it (JSON: latency_p50_seconds...).
	PerSec        float64       `json:"completed_per_second"`
	TokensPerSec  float64       `json:"tokens_per_second"`
	P50, P95, P99 time.Duration `json:"-"`
}

// The durations go out in seconds, as JSON numbers, under names that say
// so: a dashboard should not have to know Go's nanoseconds.

type jsonJob Job

type jobJSON struct {
	jsonJob
	// Done is written and not read back: Succeeded + Failed.
	Done int64   `json:"done"`
	ETA  float64 `json:"eta_seconds"`
}

// MarshalJSON writes j with its ETA as eta_seconds and its ended items as
// done.
func (j Job) MarshalJSON() ([]byte, error) {
	return json.Marshal(jobJSON{jsonJob(j), j.Done(), j.ETA.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (j *Job) UnmarshalJSON(b []byte) error {
	var v jobJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*j = Job(v.jsonJob)
	j.ETA = seconds(v.ETA)
	return nil
}

type jsonRequests Requests

type requestsJSON struct {
	jsonRequests
	P50 float64 `json:"latency_p50_seconds"`
	P95 float64 `json:"latency_p95_seconds"`
	P99 float64 `json:"latency_p99_seconds"`
}

// MarshalJSON writes r with its latencies in seconds.
func (r Requests) MarshalJSON() ([]byte, error) {
	return json.Marshal(requestsJSON{jsonRequests(r), r.P50.Seconds(), r.P95.Seconds(), r.P99.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Requests) UnmarshalJSON(b []byte) error {
	var v requestsJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Requests(v.jsonRequests)
	r.P50, r.P95, r.P99 = seconds(v.P50), seconds(v.P95), seconds(v.P99)
	return nil
}

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
	snap := Snapshot{Time: now}
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
		snap.Jobs = s.src.Jobs()
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

// readMetrics fills the request counts and the cumulative values rates
// derive from, from the Prometheus families of the core's instruments.
func (s *Sampler) readMetrics(snap *Snapshot, raw *rawSample) {
	fams, err := s.src.Metrics.Gather()
	if err != nil && len(fams) == 0 {
		return
	}
	for _, f := range fams {
		switch f.GetName() {
		case "batcher_requests_admitted_total":
			snap.Requests.Admitted = sumCounter(f)
		case "batcher_requests_rejected_total":
			snap.Requests.Rejected = sumCounter(f)
		case "batcher_requests_completed_total":
			for _, m := range f.GetMetric() {
				if label(m, "batcher_outcome") == "ok" {
					snap.Requests.Completed += int64(m.GetCounter().GetValue())
				} else {
					snap.Requests.Failed += int64(m.GetCounter().GetValue())
				}
			}
			raw.completed = snap.Requests.Completed + snap.Requests.Failed
		case "batcher_request_duration_seconds":
			for _, m := range f.GetMetric() {
				h := m.GetHistogram()
				bs := h.GetBucket()
				if raw.latency == nil {
					raw.bounds = make([]float64, len(bs))
					for i, b := range bs {
						raw.bounds[i] = b.GetUpperBound()
					}
					raw.latency = make([]uint64, len(bs)+1) // and +Inf
				}
				if len(bs)+1 != len(raw.latency) {
					continue
				}
				var prev uint64
				for i, b := range bs {
					raw.latency[i] += b.GetCumulativeCount() - prev
					prev = b.GetCumulativeCount()
				}
				raw.latency[len(bs)] += h.GetSampleCount() - prev
			}
		case "gen_ai_client_token_usage":
			for _, m := range f.GetMetric() {
				raw.tokens += int64(m.GetHistogram().GetSampleSum())
			}
		case "batcher_upstream_batch_api_batches_total":
			byBackend(snap, f, func(be *Backend, n int64) { be.BatchAPIBatches = n })
		case "batcher_upstream_batch_api_requests_total":
			byBackend(snap, f, func(be *Backend, n int64) { be.BatchAPIRequests = n })
		case "batcher_budget_requests_used_total":
			perBackend(f, raw.budgetReqs)
		case "batcher_budget_tokens_used_total":
			perBackend(f, raw.budgetToks)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func sumCounter(f *dto.MetricFamily) int64 {
	var n float64
	for _, m := range f.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return int64(n)
}

func perBackend(f *dto.MetricFamily, into map[string]int64) {
	for _, m := range f.GetMetric() {
		into[label(m, "batcher_backend")] += int64(m.GetCounter().GetValue())
	}
}

// byBackend sums counter f by backend and sets each of snap's backends'
// sum with set.
func byBackend(snap *Snapshot, f *dto.MetricFamily, set func(*Backend, int64)) {
	by := map[string]int64{}
	perBackend(f, by)
	for i := range snap.Backends {
		set(&snap.Backends[i], by[snap.Backends[i].Name])
	}
}

// derive fills snap's rates from raw against the samples kept: the last
// interval for request rates and latency, the last minute for budgets and
// jobs. Called with mu held.
func (s *Sampler) derive(snap *Snapshot, raw *rawSample) {
	if len(s.raw) == 0 {
		return
	}
	prev := s.raw[len(s.raw)-1]
	if el := raw.t.Sub(prev.t).Seconds(); el > 0 {
		snap.Requests.PerSec = float64(raw.completed-prev.completed) / el
		snap.Requests.TokensPerSec = float64(raw.tokens-prev.tokens) / el
	}
	if len(raw.latency) > 0 && (prev.latency == nil || len(prev.latency) == len(raw.latency)) {
		delta := make([]uint64, len(raw.latency))
		for i := range delta {
			delta[i] = raw.latency[i]
			if prev.latency != nil {
				delta[i] -= prev.latency[i]
			}
		}
		snap.Requests.P50 = quantile(raw.bounds, delta, 0.50)
		snap.Requests.P95 = quantile(raw.bounds, delta, 0.95)
		snap.Requests.P99 = quantile(raw.bounds, delta, 0.99)
	}
	// A minute back, or the oldest sample.
	old := s.raw[0]
	for i := len(s.raw) - 1; i >= 0; i-- {
		if raw.t.Sub(s.raw[i].t) >= time.Minute {
			old = s.raw[i]
			break
		}
	}
	if el := raw.t.Sub(old.t); el > 0 {
		perMin := time.Minute.Seconds() / el.Seconds()
		for i := range snap.Backends {
			be := &snap.Backends[i]
			be.RPMUsed = float64(raw.budgetReqs[be.Name]-old.budgetReqs[be.Name]) * perMin
			be.TPMUsed = float64(raw.budgetToks[be.Name]-old.budgetToks[be.Name]) * perMin
		}
		for i := range snap.Jobs {
			j := &snap.Jobs[i]
			if j.ItemsPerSec > 0 || j.ETA > 0 {
				continue // the source's own figures (batcherd: GetJob's)
			}
			if oldDone, ok := old.jobDone[j.ID]; ok {
				j.ItemsPerSec = float64(raw.jobDone[j.ID]-oldDone) / el.Seconds()
				j.TokensPerSec = float64(raw.jobTokens[j.ID]-old.jobTokens[j.ID]) / el.Seconds()
			}
			if left := j.Total - j.Done(); left > 0 && j.ItemsPerSec > 0 {
				j.ETA = time.Duration(float64(left) / j.ItemsPerSec * float64(time.Second))
			}
		}
	}
}

// quantile estimates the q quantile of a histogram's bucket counts, by
// linear interpolation inside the bucket it falls in (as Prometheus'
// histogram_quantile does). 0 when the histogram is empty.
func quantile(bounds []float64, counts []uint64, q float64) time.Duration {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var cum float64
	for i, c := range counts {
		if cum+float64(c) < rank || c == 0 {
			cum += float64(c)
			continue
		}
		lo := 0.0
		if i > 0 {
			lo = bounds[i-1]
		}
		if i >= len(bounds) { // the +Inf bucket: its lower bound
			return seconds(lo)
		}
		hi := bounds[i]
		return seconds(lo + (hi-lo)*(rank-cum)/float64(c))
	}
	return seconds(bounds[len(bounds)-1])
}

func seconds(s float64) time.Duration {
	if s > math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}
