package telemetry

import (
	"encoding/json"
	"time"
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
