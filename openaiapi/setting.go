package openaiapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the options.
const (
	// DefaultMaxBodyBytes bounds a JSON request body: room for an
	// embeddings call of MaxInputs inputs of a few kilobytes each.
	DefaultMaxBodyBytes = 16 << 20
	// DefaultMaxJSONDepth bounds how deeply a JSON body nests. OpenAI
	// bodies nest a handful of levels; a tool's JSON schema a few more.
	DefaultMaxJSONDepth = 64
	// DefaultMaxFileBytes bounds an uploaded file.
	DefaultMaxFileBytes = 100 << 20
	// DefaultMaxInputs bounds the items of one embeddings input or
	// completions prompt, as OpenAI does.
	DefaultMaxInputs = 2048
	// MaxTimeout is the longest deadline a client's timeout header may
	// ask for: the core's own bound.
	MaxTimeout = 24 * time.Hour
)

// Option configures a Handler.
type Option func(*config)

// WithTokens sets the bearer tokens callers may present in Authorization.
// Default none: every call is served (batcherd then binds to loopback only).
// An empty token fails New. Tokens are compared in constant time and never
// logged.
func WithTokens(tokens ...string) Option {
	return func(c *config) { c.tokens = append(c.tokens, tokens...) }
}

// WithMaxBodyBytes bounds a JSON request body; a larger one is answered 413.
// Default DefaultMaxBodyBytes; less than 1 fails New.
func WithMaxBodyBytes(n int64) Option { return func(c *config) { c.maxBody = n } }

// WithMaxJSONDepth bounds how deeply a JSON body nests; a deeper one is
// answered 400. Default DefaultMaxJSONDepth; less than 2 fails New.
func WithMaxJSONDepth(n int) Option { return func(c *config) { c.maxDepth = n } }

// WithMaxFileBytes bounds an uploaded file; a larger one is answered 413.
// Default DefaultMaxFileBytes; less than 1 fails New.
func WithMaxFileBytes(n int64) Option { return func(c *config) { c.maxFile = n } }

// WithMaxInputs bounds the items of one embeddings input or completions
// prompt array. Default DefaultMaxInputs; less than 1 fails New.
func WithMaxInputs(n int) Option { return func(c *config) { c.maxInputs = n } }

// WithDefaultTimeout bounds a call whose client sent no timeout header.
// Default 0: only the core's queue timeout bounds it. Negative or past
// MaxTimeout fails New.
func WithDefaultTimeout(d time.Duration) Option { return func(c *config) { c.defaultTimeout = d } }

// WithFileStore serves /v1/files from fs. Default none: the files
// endpoints answer 501.
func WithFileStore(fs *FileStore) Option { return func(c *config) { c.files = fs } }

// WithBatches mounts h at /v1/batches and under /v1/batches/, behind the
// same authentication, shutdown check and tracing as the other endpoints.
// Default none: those paths answer 404. h may use DecodeJSON and WriteError
// to read and answer as the rest of the API does.
func WithBatches(h http.Handler) Option { return func(c *config) { c.batches = h } }

// WithTracerProvider makes every call a server span (otelhttp) that
// continues the caller's traceparent; the core's request span is its
// child. Default none: no spans, and traceparent is not read.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider records otelhttp's server metrics for every call
// (http.server.request.duration and the body sizes) by method, status
// code and http.route, the endpoint's template (/v1/files/{id}, ...).
// Their server.address and server.port are WithServerAddress's, never the
// caller's Host header. Default none: no metrics.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithServerAddress sets the address the front door listens on, as
// host:port (batcherd passes its listener's), which its metrics and spans
// carry as server.address and server.port (the port left out when it is
// the scheme's default or 0). Default none: server.address is empty, which
// Prometheus shows as no label, and no server.port. otelhttp would
// otherwise take both from the Host header, which the caller chooses. An
// address that is not host:port, with a port of 0 to 65535 in decimal
// (not a service name), makes New fail.
func WithServerAddress(addr string) Option { return func(c *config) { c.serverAddress = addr } }

// WithPropagator sets how traceparent and tracestate are read. Default the
// W3C trace context propagator; nil is ignored.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithAccessFunc sets what each call's caller may ask of the core:
// f(ctx) is called once a call, after authentication, and every request of
// the call is admitted with it (batcher.Access.Admit: its routes, its
// priority ceiling, its tenant for the core's quotas); /v1/models lists
// only its routes, and files and batches are its tenant's (TenantOf).
// batcherd passes security.AccessFrom. Default none, as is f returning
// nil: every caller may use everything, as one unnamed tenant.
func WithAccessFunc(f func(context.Context) *batcher.Access) Option {
	return func(c *config) { c.access = f }
}

// WithLogger sets where the handler logs. Default slog.Default(); nil is
// ignored.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

type config struct {
	tokens         []string
	maxBody        int64
	maxDepth       int
	maxFile        int64
	maxInputs      int
	defaultTimeout time.Duration
	files          *FileStore
	batches        http.Handler
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagator     propagation.TextMapPropagator
	serverAddress  string
	logger         *slog.Logger
	access         func(context.Context) *batcher.Access
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		maxBody:   DefaultMaxBodyBytes,
		maxDepth:  DefaultMaxJSONDepth,
		maxFile:   DefaultMaxFileBytes,
		maxInputs: DefaultMaxInputs,
	}
	for _, o := range opts {
		o(c)
	}
	var errs []error
	for i, t := range c.tokens {
		if t == "" {
			errs = append(errs, fmt.Errorf("tokens[%d]: must not be empty", i))
		}
	}
	if c.maxBody < 1 {
		errs = append(errs, fmt.Errorf("max body bytes: must be at least 1, got %d", c.maxBody))
	}
	if c.maxDepth < 2 {
		errs = append(errs, fmt.Errorf("max JSON depth: must be at least 2, got %d", c.maxDepth))
	}
	if c.maxFile < 1 {
		errs = append(errs, fmt.Errorf("max file bytes: must be at least 1, got %d", c.maxFile))
	}
	if c.maxInputs < 1 {
		errs = append(errs, fmt.Errorf("max inputs: must be at least 1, got %d", c.maxInputs))
	}
	if c.defaultTimeout < 0 || c.defaultTimeout > MaxTimeout {
		errs = append(errs, fmt.Errorf("default timeout: must be 0 to %v, got %v", MaxTimeout, c.defaultTimeout))
	}
	if c.serverAddress != "" {
		// The port must be a number otelhttp reads (0 to 65535): one it
		// cannot, it takes from the caller's Host header instead.
		if _, port, err := net.SplitHostPort(c.serverAddress); err != nil || !isPort(port) {
			errs = append(errs, fmt.Errorf("server address: want host:port with a port of 0 to 65535, got %q", c.serverAddress))
		}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.propagator == nil {
		c.propagator = propagation.TraceContext{}
	}
	return c, errors.Join(errs...)
}

// isPort reports whether s is a port number, 0 to 65535, in decimal.
func isPort(s string) bool {
	_, err := strconv.ParseUint(s, 10, 16)
	return err == nil
}
