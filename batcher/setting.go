package batcher

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults, from the seed design.
const (
	DefaultMaxBatchSize    = 10
	DefaultMinBatchSize    = 2
	DefaultWindow          = 100 * time.Millisecond
	DefaultMaxWait         = 5 * time.Second
	DefaultQueueCapacity   = 1000
	DefaultQueueTimeout    = 60 * time.Second
	DefaultMaxConcurrency  = 8
	DefaultAgingStep       = time.Second
	DefaultIdleLaneTimeout = time.Minute
	DefaultMaxLanes        = 4096
	DefaultMaxInputBytes   = 256 << 10
	DefaultMaxTokensLimit  = 32768
	DefaultMaxTokens       = 256
	// DefaultMaxBatchTokens of 0 means no token budget per batch.
	DefaultMaxBatchTokens = 0
	DefaultProtectedShare = 0.2
	// DefaultAttemptTimeout caps one chat or completion call when no
	// attempt timeout is configured, DefaultEmbeddingAttemptTimeout one
	// embedding call; within the cap an attempt gets an even share of what
	// is left of its batch's deadline, so that every retry the policy allows
	// still fits.
	DefaultAttemptTimeout          = 2 * time.Minute
	DefaultEmbeddingAttemptTimeout = 30 * time.Second
	// DefaultStreamIdleTimeout bounds the silence between two deltas of a
	// streamed answer when no StreamIdleTimeout is configured.
	DefaultStreamIdleTimeout = 60 * time.Second
	// minAttemptTimeout is the least an automatic attempt timeout gives a
	// call.
	minAttemptTimeout = time.Second
	// MaxBackendConcurrency bounds BackendConfig.MaxConcurrency: each slot
	// is a dispatch worker goroutine and a slot of its channel, so a typo
	// of a few zeros must fail at once, not exhaust memory at the first
	// batch. Providers allow far fewer concurrent calls.
	MaxBackendConcurrency = 10_000
	// MaxFallbacks bounds Route.Fallbacks: a lane's key numbers the
	// route's targets (its backend, then each fallback) in a byte.
	MaxFallbacks = math.MaxUint8 - 1
)

// BatchConfig sets how a route's lanes form batches. A zero field takes its
// default.
type BatchConfig struct {
	// MaxBatchSize: a batch is sent when it holds this many requests.
	// Default DefaultMaxBatchSize; must be at least 1.
	MaxBatchSize int
	// MinBatchSize: a batch this large is sent at once while its backend has
	// idle capacity. Default DefaultMinBatchSize; 1 to MaxBatchSize.
	MinBatchSize int
	// MaxBatchTokens: a batch is sent when its estimated tokens (prompt plus
	// max_tokens) reach this budget. Default 0: no budget.
	MaxBatchTokens int
	// Window: how long a NORMAL request may wait for its batch to fill.
	// Default DefaultWindow.
	Window time.Duration
	// MaxWait caps every priority's delay. Default DefaultMaxWait; at least
	// Window.
	MaxWait time.Duration
	// Delays, when set, gives each priority its own delay, indexed by
	// Priority; otherwise URGENT 0, HIGH Window/2, NORMAL Window, LOW
	// 10×Window and DEFERRABLE MaxWait, all capped by MaxWait.
	Delays *[5]time.Duration
}

// Route maps the model name callers use to a backend and its model.
type Route struct {
	Name    string    // what callers put in Request.Route
	Op      Operation // the one operation the route serves
	Backend string    // the backend's name
	Model   string    // the backend's model name; Name when empty
	// Fallbacks are tried in order when the backend before is unhealthy
	// (breaker open) or its budget cannot meet a request's deadline.
	Fallbacks []Target
	Batch     BatchConfig
	// MaxInputBytes limits a request's input. Default DefaultMaxInputBytes.
	MaxInputBytes int
	// MaxTokensLimit is the largest max_tokens a request may ask for.
	// Default DefaultMaxTokensLimit.
	MaxTokensLimit int32
	// DefaultMaxTokens applies to requests that leave max_tokens unset.
	// Default DefaultMaxTokens.
	DefaultMaxTokens int32
	// Cache is the route's use of the response cache, if one is set
	// (WithCache).
	Cache RouteCache
}

// BackendConfig names a Backend and bounds it.
type BackendConfig struct {
	Name    string
	Backend Backend
	// MaxConcurrency bounds concurrent Dispatch calls. Default
	// DefaultMaxConcurrency; 1 to MaxBackendConcurrency.
	MaxConcurrency int
	// MinConcurrency is the floor the concurrency limit may fall to when the
	// upstream answers 429s; it climbs back to MaxConcurrency after a run of
	// successes. Default MaxConcurrency (no adaptation); 1 to MaxConcurrency.
	MinConcurrency int
	// RPM and TPM are the provider's requests and tokens per minute. 0: no
	// limit. A batch spends requests as UpstreamCalls says (one by default)
	// and the tokens it reserves: estimated prompt tokens plus max_tokens.
	//
	// When RPM (or TPM) is 0 the core learns the budget from the upstream's
	// x-ratelimit-limit-*, -remaining-* and -reset-* headers, as a backend
	// reports them in RateLimitInfo: the limit is the burst, and the refill
	// rate is (limit - remaining) / reset.
	RPM int
	TPM int
	// RPMBurst and TPMBurst size the buckets: how much may go at once after
	// a quiet spell. Default: one second's allowance until the upstream's
	// limit header says how large its bucket is, then that (a provider that
	// allows a minute's burst gets it used; see batcherd.example.yaml for
	// the figures). A configured burst is kept as it is. At least 1.
	RPMBurst int
	TPMBurst int
	// ProtectedShare of the concurrency and rate is held for URGENT and HIGH
	// work. Default DefaultProtectedShare; at most 0.9; negative: none.
	// While no URGENT or HIGH work waits, background work may borrow it;
	// once such work waits, the next free slot is its, and background work
	// leaves the share in the buckets again.
	ProtectedShare float64
	// StrictProtectedShare keeps the protected share idle even while no
	// URGENT or HIGH work waits (no lending). Default false.
	StrictProtectedShare bool
	// AttemptTimeout bounds one upstream call. Default (0): an even share
	// of the time left before the batch's deadline over the attempts the
	// retry policy allows (at least a second), capped at
	// DefaultAttemptTimeout for chat and completions and
	// DefaultEmbeddingAttemptTimeout for embeddings;
	// negative fails New.
	AttemptTimeout time.Duration
	// StreamIdleTimeout bounds the silence of a streamed answer once its
	// first delta came (the attempt timeout bounds the wait for that
	// one): an upstream that sends nothing for this long mid-stream is
	// stalled, its call is closed and the request ends partial with an
	// error (ErrStreamStalled, a ClassTimeout UpstreamError). Default
	// DefaultStreamIdleTimeout; negative fails New.
	StreamIdleTimeout time.Duration
	// Retry is the retry policy. Zero fields take their defaults.
	Retry RetryPolicy
	// Breaker configures the circuit breaker. Zero fields take their defaults.
	Breaker BreakerConfig

	rpmBurstSet, tpmBurstSet bool // the bursts were configured, not defaulted
}

// Target is a backend and the model name it knows a route by.
type Target struct {
	Backend string
	Model   string // the route's name when empty
}

// Option configures a Batcher.
type Option func(*config)

// WithRoute adds a route. Its backend must be added too. A route with a
// duplicate name, or a bad field, fails New with an error naming the field.
func WithRoute(r Route) Option { return func(c *config) { c.routes = append(c.routes, r) } }

// WithBackend adds a backend.
func WithBackend(b BackendConfig) Option {
	return func(c *config) { c.backends = append(c.backends, b) }
}

// WithQueueCapacity bounds the requests admitted and not yet terminal.
// Default DefaultQueueCapacity; less than 1 fails New.
func WithQueueCapacity(n int) Option { return func(c *config) { c.queueCapacity = n } }

// WithQueueReserve holds a share of the queue capacity for URGENT and HIGH
// requests: NORMAL and lower work is refused once the queue is that close
// to full. When the whole queue is full, an URGENT request evicts the
// newest queued DEFERRABLE request, else the newest queued LOW one, which
// ends with ErrEvicted. Default DefaultQueueReserve; 0 to 0.9, else New
// fails.
func WithQueueReserve(share float64) Option {
	return func(c *config) { c.queueReserve = share; c.queueReserveSet = true }
}

// WithQueueTimeout bounds every request's life. Default DefaultQueueTimeout;
// not positive fails New.
func WithQueueTimeout(d time.Duration) Option { return func(c *config) { c.queueTimeout = d } }

// WithAgingStep sets how long a waiting request takes to climb one priority
// when capacity is scarce. Default DefaultAgingStep; not positive fails New.
func WithAgingStep(d time.Duration) Option { return func(c *config) { c.agingStep = d } }

// WithIdleLaneTimeout sets how long an empty lane lives before it is
// reclaimed. Default DefaultIdleLaneTimeout; not positive fails New.
func WithIdleLaneTimeout(d time.Duration) Option { return func(c *config) { c.idleLane = d } }

// WithMaxLanes caps the lanes open at once (a lane is a route with one set
// of batch-relevant parameters, and an owner goroutine; an idle one lives
// for the idle lane timeout, or until the cap needs its room). At the cap,
// idle lanes close to make room; a caller (tenant, then connection) holds
// at most a fair share of the cap while others hold lanes. A request that
// still finds no room fails with a *LaneLimitError (ErrTooManyLanes) that
// says when a lane is expected to make room (lanecap.go). Default
// DefaultMaxLanes; less than 1 fails New.
func WithMaxLanes(n int) Option { return func(c *config) { c.maxLanes = n } }

// WithTracerProvider sets where request and batch spans go. Default none: no
// spans, at no cost.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

type config struct {
	routes          []Route
	backends        []BackendConfig
	queueCapacity   int
	queueReserve    float64
	queueReserveSet bool
	queueTimeout    time.Duration
	agingStep       time.Duration
	idleLane        time.Duration
	maxLanes        int
	tracerProvider  trace.TracerProvider
	meterProvider   metric.MeterProvider
	metricsProducer *MetricsProducer
	logger          *slog.Logger
	coordinator     Coordinator
	cache           Cache
	streamBuffer    int
	streamMaxUnread int
}

// routeConfig is a Route with every default resolved.
type routeConfig struct {
	Route
	delays  [numPriorities]time.Duration
	targets []target // the backend, then the fallbacks
	// hot is, per target, the lane Submit used last: most requests of a
	// route share one lane, and this spares them the lane map's lock and
	// hash. Any goroutine may store; a lane found closed is dropped.
	hot []atomic.Pointer[lane]
	// features is what every target honours (FeatureDeclarer).
	features Features
	// metrics is the route's attribute sets and counts, set by
	// metrics.addRoutes before the route is published (nil without a
	// meter provider), so that recording looks up no map.
	metrics *routeMetrics
}

type target struct {
	be    *backendState
	model string
	// metrics is the attribute sets of the route on this target, set
	// with routeConfig.metrics.
	metrics *pairMetrics
	// shared is which generation parameters one batch shares on this
	// target, from its backend (ParamSharer): the lane key holds only
	// these.
	shared ParamSet
	// features is what this target honours (FeatureDeclarer); the
	// route's features are every target's together.
	features Features
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		queueCapacity: DefaultQueueCapacity,
		queueTimeout:  DefaultQueueTimeout,
		agingStep:     DefaultAgingStep,
		idleLane:      DefaultIdleLaneTimeout,
		maxLanes:      DefaultMaxLanes,

		streamBuffer:    DefaultStreamBuffer,
		streamMaxUnread: DefaultStreamMaxUnread,
	}
	for _, o := range opts {
		o(c)
	}
	var errs []error
	if c.queueCapacity < 1 {
		errs = append(errs, badSetting("queue_capacity", "must be at least 1, got %d", c.queueCapacity))
	}
	if !c.queueReserveSet {
		c.queueReserve = DefaultQueueReserve
	}
	if !(c.queueReserve >= 0 && c.queueReserve <= 0.9) {
		errs = append(errs, badSetting("queue_reserve", "must be 0 to 0.9, got %v", c.queueReserve))
	}
	if c.queueTimeout <= 0 {
		errs = append(errs, badSetting("queue_timeout", "must be positive, got %v", c.queueTimeout))
	}
	if c.agingStep <= 0 {
		errs = append(errs, badSetting("aging_step", "must be positive, got %v", c.agingStep))
	}
	if c.maxLanes < 1 {
		errs = append(errs, badSetting("max_lanes", "must be at least 1, got %d", c.maxLanes))
	}
	if c.streamBuffer < 1 {
		errs = append(errs, badSetting("stream_buffer", "must be at least 1 delta, got %d", c.streamBuffer))
	}
	if c.streamMaxUnread < 1 {
		errs = append(errs, badSetting("stream_max_unread", "must be at least 1 byte, got %d", c.streamMaxUnread))
	}
	if c.idleLane <= 0 {
		errs = append(errs, badSetting("idle_lane_timeout", "must be positive, got %v", c.idleLane))
	}
	return c, errors.Join(errs...)
}

func resolveBackend(b BackendConfig) (BackendConfig, error) {
	if b.Name == "" {
		return b, &SettingError{Owner: "backend", Path: "name", Reason: "must not be empty"}
	}
	if b.Backend == nil {
		return b, fmt.Errorf("backend %q: no implementation", b.Name)
	}
	if b.MaxConcurrency == 0 {
		b.MaxConcurrency = DefaultMaxConcurrency
	}
	owner := fmt.Sprintf("backend %q", b.Name)
	bad := func(path, format string, args ...any) error {
		e := badSetting(path, format, args...)
		e.Owner = owner
		return e
	}
	if b.MaxConcurrency < 1 || b.MaxConcurrency > MaxBackendConcurrency {
		return b, bad("max_concurrency", "must be 1 to %d, got %d", MaxBackendConcurrency, b.MaxConcurrency)
	}
	if b.MinConcurrency == 0 {
		b.MinConcurrency = b.MaxConcurrency
	}
	if b.MinConcurrency < 1 || b.MinConcurrency > b.MaxConcurrency {
		return b, bad("min_concurrency", "must be 1 to max concurrency %d, got %d", b.MaxConcurrency, b.MinConcurrency)
	}
	if b.RPM < 0 {
		return b, bad("rpm", "must not be negative, got %d", b.RPM)
	}
	if b.TPM < 0 {
		return b, bad("tpm", "must not be negative, got %d", b.TPM)
	}
	b.rpmBurstSet, b.tpmBurstSet = b.RPMBurst != 0, b.TPMBurst != 0
	if b.RPMBurst == 0 {
		b.RPMBurst = perSecond(b.RPM)
	}
	if b.TPMBurst == 0 {
		b.TPMBurst = perSecond(b.TPM)
	}
	if b.RPMBurst < 1 {
		return b, bad("rpm_burst", "must be at least 1, got %d", b.RPMBurst)
	}
	if b.TPMBurst < 1 {
		return b, bad("tpm_burst", "must be at least 1, got %d", b.TPMBurst)
	}
	if b.ProtectedShare == 0 {
		b.ProtectedShare = DefaultProtectedShare
	}
	if b.ProtectedShare > 0.9 || b.ProtectedShare != b.ProtectedShare {
		return b, bad("protected_share", "must be at most 0.9, got %v", b.ProtectedShare)
	}
	b.ProtectedShare = max(b.ProtectedShare, 0)
	if b.AttemptTimeout < 0 {
		return b, bad("attempt_timeout", "must be positive, got %v", b.AttemptTimeout)
	}
	if b.StreamIdleTimeout < 0 {
		return b, bad("stream_idle_timeout", "must be positive, got %v", b.StreamIdleTimeout)
	}
	if b.StreamIdleTimeout == 0 {
		b.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	var err error
	if b.Retry, err = b.Retry.resolve(); err != nil {
		return b, settingOf(owner, "retry", err)
	}
	if b.Breaker, err = b.Breaker.resolve(); err != nil {
		return b, settingOf(owner, "breaker", err)
	}
	return b, nil
}

func resolveRoute(r Route) (routeConfig, error) {
	rc := routeConfig{Route: r}
	if r.Name == "" {
		return rc, &SettingError{Owner: "route", Path: "name", Reason: "must not be empty"}
	}
	owner := fmt.Sprintf("route %q", r.Name)
	bad := func(path, format string, args ...any) error {
		e := badSetting(path, format, args...)
		e.Owner = owner
		return e
	}
	if r.Op < OpChat || r.Op > OpEmbedding {
		return rc, bad("operation", "must be chat, completion or embedding")
	}
	if r.Backend == "" {
		return rc, bad("backend", "must name a backend")
	}
	if rc.Model == "" {
		rc.Model = r.Name
	}
	if len(r.Fallbacks) > MaxFallbacks {
		return rc, bad("fallbacks", "must hold at most %d, got %d", MaxFallbacks, len(r.Fallbacks))
	}
	if err := rc.Cache.check(bad); err != nil {
		return rc, err
	}
	b := &rc.Batch
	if b.MaxBatchSize == 0 {
		b.MaxBatchSize = DefaultMaxBatchSize
	}
	if b.MaxBatchSize < 1 {
		return rc, bad("max_batch_size", "must be at least 1, got %d", b.MaxBatchSize)
	}
	if b.MinBatchSize == 0 {
		b.MinBatchSize = min(DefaultMinBatchSize, b.MaxBatchSize)
	}
	if b.MinBatchSize < 1 || b.MinBatchSize > b.MaxBatchSize {
		return rc, bad("min_batch_size", "must be 1 to max batch size %d, got %d", b.MaxBatchSize, b.MinBatchSize)
	}
	if b.MaxBatchTokens < 0 {
		return rc, bad("max_batch_tokens", "must not be negative, got %d", b.MaxBatchTokens)
	}
	if b.Window == 0 {
		b.Window = DefaultWindow
	}
	if b.Window < 0 {
		return rc, bad("window", "must be positive, got %v", b.Window)
	}
	if b.MaxWait == 0 {
		b.MaxWait = max(DefaultMaxWait, b.Window)
	}
	if b.MaxWait < b.Window {
		return rc, bad("max_wait", "must be at least the window %v, got %v", b.Window, b.MaxWait)
	}
	if b.Delays != nil {
		for p, d := range b.Delays {
			if d < 0 {
				return rc, bad(Priority(p).String()+"_delay", "must not be negative, got %v", d)
			}
			rc.delays[p] = min(d, b.MaxWait)
		}
	} else {
		rc.delays = [numPriorities]time.Duration{
			PriorityUrgent:     0,
			PriorityHigh:       b.Window / 2,
			PriorityNormal:     b.Window,
			PriorityLow:        min(10*b.Window, b.MaxWait),
			PriorityDeferrable: b.MaxWait,
		}
	}
	if rc.MaxInputBytes == 0 {
		rc.MaxInputBytes = DefaultMaxInputBytes
	}
	if rc.MaxInputBytes < 1 {
		return rc, bad("max_input_bytes", "must be at least 1, got %d", rc.MaxInputBytes)
	}
	if rc.MaxTokensLimit == 0 {
		rc.MaxTokensLimit = DefaultMaxTokensLimit
	}
	if rc.MaxTokensLimit < 1 {
		return rc, bad("max_tokens_limit", "must be at least 1, got %d", rc.MaxTokensLimit)
	}
	if rc.DefaultMaxTokens == 0 {
		rc.DefaultMaxTokens = min(DefaultMaxTokens, rc.MaxTokensLimit)
	}
	if rc.DefaultMaxTokens < 1 || rc.DefaultMaxTokens > rc.MaxTokensLimit {
		return rc, bad("default_max_tokens", "must be 1 to max tokens limit %d, got %d", rc.MaxTokensLimit, rc.DefaultMaxTokens)
	}
	return rc, nil
}
