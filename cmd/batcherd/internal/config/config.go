package config

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/server"
)

// Defaults of the settings the core and the server do not default
// themselves.
const (
	DefaultListen       = "127.0.0.1:50051"
	DefaultLogLevel     = "info"
	DefaultLogFormat    = "json"
	DefaultDrainTimeout = 30 * time.Second

	// The embedded simulated provider's defaults.
	DefaultSimBaseLatency = 50 * time.Millisecond
	DefaultSimPerToken    = time.Millisecond
	// A streamed answer's pace, slow enough to watch (make run).
	DefaultSimTimeToFirstToken = 200 * time.Millisecond
	DefaultSimTokensPerSecond  = 25
)

// Config is batcherd's whole configuration, as its YAML file spells it.
//
// In the file, a scalar left out keeps its default; a list given replaces
// the default list. Inside routes and backends, a number or duration left
// out or 0 takes the core's default.
type Config struct {
	// File is the YAML file Load read (--config or BATCHER_CONFIG); empty
	// when none. batcherd watches it for a reload.
	File string `yaml:"-"`
	// Listen is the gRPC listen address, host:port; port 0 picks a free one.
	Listen string `yaml:"listen"`
	Log    Log    `yaml:"log"`

	// QueueCapacity bounds the requests admitted and not yet done.
	QueueCapacity int `yaml:"queue_capacity"`
	// QueueTimeout bounds every request's life.
	QueueTimeout Duration `yaml:"queue_timeout"`
	// DrainTimeout bounds graceful shutdown.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// AgingStep is how long waiting work takes to climb one priority.
	AgingStep Duration `yaml:"aging_step"`
	// IdleLaneTimeout is how long an empty lane lives.
	IdleLaneTimeout Duration `yaml:"idle_lane_timeout"`
	// MaxLanes bounds the live lanes (distinct route, target and parameter
	// sets); a request that would open one more is refused with
	// RESOURCE_EXHAUSTED naming the cap.
	MaxLanes int `yaml:"max_lanes"`
	// StreamWindow bounds one stream's requests in flight.
	StreamWindow int `yaml:"stream_window"`
	// SummaryInterval is how often a stream gets a summary by default.
	SummaryInterval Duration `yaml:"summary_interval"`
	// Stream limits (limits.go): open SubmitStreams server-wide and answers
	// owed on streams server-wide. HTTP/2 streams per connection are under
	// security.limits.
	MaxStreams         int `yaml:"max_streams"`
	MaxPendingMessages int `yaml:"max_pending_messages"`

	Backends []Backend `yaml:"backends"`
	Routes   []Route   `yaml:"routes"`

	Telemetry Telemetry `yaml:"telemetry"`
	Jobs      Jobs      `yaml:",inline"`
	// HTTP is the OpenAI-compatible HTTP front door (http.go).
	HTTP     HTTP     `yaml:"http"`
	Security Security `yaml:"security"` // security.go
	// Fleet shares the budgets with other replicas (fleet.go).
	Fleet Fleet `yaml:"fleet"`
	// Cache is the response cache (cache.go).
	Cache Cache `yaml:"cache"`
}

// Log configures the slog logger.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn or error
	Format string `yaml:"format"` // json or text
}

// Backend is one provider the routes may name.
type Backend struct {
	Name string `yaml:"name"`
	// Type is the provider: "sim", the embedded simulated provider,
	// "openai", an OpenAI-compatible HTTP API, or "anthropic", Anthropic's
	// Messages API (chat routes only).
	Type string `yaml:"type"`
	// MaxConcurrency bounds the core's concurrent dispatches to this
	// backend. 0: the core's default.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MinConcurrency is the floor the core's adaptive concurrency may fall
	// to on 429s. 0: MaxConcurrency (no adaptation).
	MinConcurrency int `yaml:"min_concurrency"`
	// RPM and TPM are the provider's limits as the core budgets them; 0:
	// none. (A sim backend's own limits are under sim.) For an openai
	// backend, set them to the account's limits: the core then spends its
	// budget before the upstream answers 429.
	RPM int `yaml:"rpm"`
	TPM int `yaml:"tpm"`
	// RPMBurst and TPMBurst size the core's buckets. 0: one second's
	// allowance; give a provider that allows a minute's burst its RPM/TPM.
	RPMBurst int `yaml:"rpm_burst"`
	TPMBurst int `yaml:"tpm_burst"`
	// ProtectedShare of concurrency and rate is held for URGENT and HIGH
	// work. 0: the core's default; at most 0.9; negative: none.
	ProtectedShare float64 `yaml:"protected_share"`
	// AttemptTimeout bounds one upstream call. 0: the core's default.
	AttemptTimeout Duration `yaml:"attempt_timeout"`
	// StreamIdleTimeout bounds the silence between two deltas of a
	// streamed answer, once the first came; a stalled upstream is cut off
	// and the request ends partial. 0: the core's default (60s).
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	Retry             Retry    `yaml:"retry"`
	Breaker           Breaker  `yaml:"breaker"`
	// Sim configures a backend of type sim; absent, it takes the defaults.
	Sim *Sim `yaml:"sim"`
	// OpenAI configures a backend of type openai; its base_url is required.
	OpenAI *OpenAI `yaml:"openai"`
	// Anthropic configures a backend of type anthropic; absent, it takes
	// the defaults (api.anthropic.com, no key).
	Anthropic *Anthropic `yaml:"anthropic"`
}

// Retry is a backend's retry policy (batcher.RetryPolicy). 0: the core's
// default.
type Retry struct {
	// MaxRetries per request; negative: none.
	MaxRetries     int      `yaml:"max_retries"`
	InitialBackoff Duration `yaml:"initial_backoff"`
	Factor         float64  `yaml:"factor"`
	MaxBackoff     Duration `yaml:"max_backoff"`
	BudgetRatio    float64  `yaml:"budget_ratio"`
	BudgetWindow   Duration `yaml:"budget_window"`
	BudgetMin      int      `yaml:"budget_min"`
}

// Breaker is a backend's circuit breaker (batcher.BreakerConfig). 0: the
// core's default.
type Breaker struct {
	// Consecutive failures that open it; negative: off.
	Consecutive int      `yaml:"consecutive"`
	Ratio       float64  `yaml:"ratio"`
	Window      Duration `yaml:"window"`
	MinCalls    int      `yaml:"min_calls"`
	Cooldown    Duration `yaml:"cooldown"`
	Probes      int      `yaml:"probes"`
}

// Sim configures the embedded simulated provider (package backend/sim).
type Sim struct {
	// BaseLatency: default DefaultSimBaseLatency; 0 is instant.
	BaseLatency *Duration `yaml:"base_latency"`
	// PerToken: default DefaultSimPerToken.
	PerToken *Duration `yaml:"per_token"`
	// TimeToFirstToken and TokensPerSecond pace streamed answers: default
	// DefaultSimTimeToFirstToken and DefaultSimTokensPerSecond.
	TimeToFirstToken *Duration `yaml:"time_to_first_token"`
	TokensPerSecond  *float64  `yaml:"tokens_per_second"`
	// MaxConcurrency is the provider's own bound, beyond which it answers
	// 429; 0: none. Distinct from the backend's max_concurrency, the core's
	// own bound.
	MaxConcurrency int `yaml:"max_concurrency"`
	RPM            int `yaml:"rpm"`
	TPM            int `yaml:"tpm"`
	RPMBurst       int `yaml:"rpm_burst"`
	TPMBurst       int `yaml:"tpm_burst"`
	MaxBatchSize   int `yaml:"max_batch_size"`
	// Native: one call carries the whole batch. Default true; false fans out
	// one call per input.
	Native             *bool   `yaml:"native"`
	FailureRate        float64 `yaml:"failure_rate"`
	PartialFailureRate float64 `yaml:"partial_failure_rate"`
	Seed               int64   `yaml:"seed"`
	// Dimensions is the embedding size of models not in Models.
	Dimensions int                 `yaml:"dimensions"`
	Models     map[string]SimModel `yaml:"models"`
}

// SimModel is one simulated model's settings.
type SimModel struct {
	Dimensions int `yaml:"dimensions"`
}

// Route maps the model name callers use to a backend.
type Route struct {
	Name string `yaml:"name"`
	// Operation is chat, completion or embedding.
	Operation string `yaml:"operation"`
	Backend   string `yaml:"backend"`
	// Model is the backend's model name; the route's name when empty.
	Model string `yaml:"model"`
	// Fallbacks are tried in order when the backend before is unhealthy or
	// cannot meet a request's deadline.
	Fallbacks        []Target `yaml:"fallbacks"`
	Batching         Batching `yaml:"batching"`
	MaxInputBytes    int      `yaml:"max_input_bytes"`
	MaxTokensLimit   int32    `yaml:"max_tokens_limit"`
	DefaultMaxTokens int32    `yaml:"default_max_tokens"`
	// Cache is the route's use of the response cache (cache.go).
	Cache RouteCache `yaml:"cache"`
	// BatchAPI, when set, lets jobs on the route choose its backend's
	// provider batch API (jobs' dispatch: batch_api or auto).
	BatchAPI *RouteBatchAPI `yaml:"batch_api"`
	// Price is what the route's provider charges: jobs report each task's
	// cost, their own and the saving of batch_api dispatch from it, and
	// batcher_cost_total counts it. Absent: the route costs nothing.
	Price *RoutePrice `yaml:"price"`
}

// RoutePrice is a route's price table, in USD per million tokens.
type RoutePrice struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
	// BatchDiscount is the fraction of the price the provider's batch API
	// takes off: 0.5 (OpenAI's and Anthropic's) is half price.
	BatchDiscount float64 `yaml:"batch_discount"`
}

// Jobs returns the price as the jobs package takes it.
func (p *RoutePrice) Jobs() jobs.Price {
	return jobs.Price{InputPerMTok: p.InputPerMTok, OutputPerMTok: p.OutputPerMTok, BatchDiscount: p.BatchDiscount}
}

// Prices returns the routes' price tables, by route name.
func (c *Config) Prices() map[string]jobs.Price {
	out := map[string]jobs.Price{}
	for _, r := range c.Routes {
		if r.Price != nil {
			out[r.Name] = r.Price.Jobs()
		}
	}
	return out
}

// RouteBatchAPI sets a route's use of its provider's batch API. Zero
// fields take the provider's limits and the jobs package's defaults.
type RouteBatchAPI struct {
	// MaxRequests and MaxBytes bound one upstream batch (at most the
	// provider's: OpenAI 50,000 requests and 200 MB).
	MaxRequests int   `yaml:"max_requests"`
	MaxBytes    int64 `yaml:"max_bytes"`
	// Gather is how long to gather tasks before submitting a batch.
	Gather Duration `yaml:"gather"`
	// PollMin and PollMax bound the backoff between looks at a batch.
	PollMin Duration `yaml:"poll_min"`
	PollMax Duration `yaml:"poll_max"`
	// MaxEnqueuedTokens is the provider's limit on the tokens of the
	// account's batches not ended (OpenAI's batch queue limit), a budget
	// the route's jobs share: a batch waits rather than pass it. 0: none.
	MaxEnqueuedTokens int64 `yaml:"max_enqueued_tokens"`
	// CreateTimeout bounds one create call, and how long a restart waits
	// for the batch of a create a kill cut off before creating one
	// (default 10m).
	CreateTimeout Duration `yaml:"create_timeout"`
}

// Target is a fallback: a backend and its model name for the route (the
// route's name when empty).
type Target struct {
	Backend string `yaml:"backend"`
	Model   string `yaml:"model"`
}

// Batching sets how a route's batches form.
type Batching struct {
	MaxBatchSize   int      `yaml:"max_batch_size"`
	MinBatchSize   int      `yaml:"min_batch_size"`
	MaxBatchTokens int      `yaml:"max_batch_tokens"`
	Window         Duration `yaml:"window"`
	MaxWait        Duration `yaml:"max_wait"`
}

// Default returns the configuration used when nothing overrides it.
func Default() *Config {
	return &Config{
		Listen:          DefaultListen,
		Log:             Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		QueueCapacity:   batcher.DefaultQueueCapacity,
		QueueTimeout:    Duration(batcher.DefaultQueueTimeout),
		DrainTimeout:    Duration(DefaultDrainTimeout),
		AgingStep:       Duration(batcher.DefaultAgingStep),
		IdleLaneTimeout: Duration(batcher.DefaultIdleLaneTimeout),
		MaxLanes:        batcher.DefaultMaxLanes,
		StreamWindow:    server.DefaultStreamWindow,
		SummaryInterval: Duration(server.DefaultSummaryInterval),
		Telemetry:       defaultTelemetry(),
		Fleet:           defaultFleet(),
		Cache:           defaultCache(),
		Jobs:            Jobs{JobStore: JobStoreSQLite, Limits: defaultJobsLimits()},

		MaxStreams:         server.DefaultMaxStreams,
		MaxPendingMessages: server.DefaultMaxPendingMessages,

		Backends: []Backend{{Name: "sim", Type: TypeSim}},
		HTTP:     HTTP{Listen: DefaultHTTPListen},
		Security: DefaultSecurity(),
		Routes: []Route{
			{Name: "sim-chat", Operation: "chat", Backend: "sim"},
			{Name: "sim-completion", Operation: "completion", Backend: "sim"},
			{Name: "sim-embed", Operation: "embedding", Backend: "sim"},
		},
	}
}

// Duration is a time.Duration written as a Go duration string ("250ms",
// "1m30s") in YAML.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as 250ms or 1m30s", n.Line)}}
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid duration %q: want a Go duration such as 250ms or 1m30s", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
