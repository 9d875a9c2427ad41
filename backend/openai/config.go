package openai

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/batcherhq/batcher/backend/openai/pack"
	"github.com/batcherhq/batcher/batcher"
)

// Defaults.
const (
	DefaultTimeout          = 60 * time.Second
	DefaultMaxResponseBytes = 32 << 20
	DefaultMaxFanOut        = 16
	DefaultMaxIdleConns     = 64
	DefaultPackMaxItems     = 10
	DefaultPackMaxTokens    = 4096
	// DefaultPackPauseAfter packs failing in a row pause a route's packing.
	DefaultPackPauseAfter = 3
	// DefaultPackPauseFor is how long a route's packing pauses.
	DefaultPackPauseFor = time.Minute
	// DefaultLogInterval spaces the logs of one kind of upstream failure on
	// one endpoint.
	DefaultLogInterval = 10 * time.Second
	// DefaultResponseFormat asks for structured output.
	DefaultResponseFormat = FormatJSONSchema
)

// The response formats a packed call may ask for.
const (
	// FormatJSONSchema sends response_format {"type":"json_schema"} with
	// pack.Schema: OpenAI, Azure OpenAI, vLLM, llama.cpp, recent Ollama.
	FormatJSONSchema = "json_schema"
	// FormatJSONObject sends response_format {"type":"json_object"}.
	FormatJSONObject = "json_object"
	// FormatNone sends no response_format; the prompt alone asks for JSON.
	FormatNone = "none"
)

// Config configures one OpenAI-compatible upstream.
type Config struct {
	// BaseURL is the API's root, the part before /chat/completions: for
	// example https://api.openai.com/v1 or http://127.0.0.1:11434/v1. Its
	// query, if any (Azure's api-version), is kept on every call. Required.
	BaseURL string
	// APIKeyEnv names the environment variable that holds the API key, read
	// once by New. Empty: no key (local servers). Set but empty fails New.
	APIKeyEnv string
	// LookupEnv reads APIKeyEnv. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// APIKeyHeader is the header that carries the key. Default
	// "Authorization", as "Bearer <key>"; any other header (Azure's
	// "api-key") carries the bare key.
	APIKeyHeader string
	// Headers are sent on every call. They may not set the key's header.
	Headers map[string]string
	// Organization and Project, when set, go out as OpenAI-Organization and
	// OpenAI-Project.
	Organization string
	Project      string
	// Timeout bounds one upstream call, body included. Default
	// DefaultTimeout; negative fails New.
	Timeout time.Duration
	// MaxResponseBytes bounds a response body; a longer one is an invalid
	// response. Default DefaultMaxResponseBytes; negative fails New.
	MaxResponseBytes int64
	// MaxFanOut bounds the concurrent upstream calls of one chat batch.
	// Default DefaultMaxFanOut; negative fails New.
	MaxFanOut int
	// MaxIdleConns bounds the idle keep-alive connections kept to the
	// upstream. Default DefaultMaxIdleConns; negative fails New.
	MaxIdleConns int
	// MaxTokensField is the chat request's field for the token budget:
	// "max_tokens" (default) or "max_completion_tokens" (OpenAI's reasoning
	// models).
	MaxTokensField string
	// Pack configures packed chat batching. Off by default.
	Pack PackConfig

	// TracerProvider makes the spans of upstream calls. Default: the global
	// provider.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into outgoing calls. Default W3C
	// traceparent only: baggage does not leave for a third party.
	Propagator propagation.TextMapPropagator
	// OnRateLimit, when set, receives what every answer, success or not,
	// says about the upstream's limits (x-ratelimit-*, Retry-After). It must
	// be quick and safe for concurrent use.
	OnRateLimit func(batcher.RateLimitInfo)
	// Logger receives the backend's logs: upstream failures (404, 429, 5xx,
	// auth, timeouts, refused connections, invalid answers) and packing
	// paused and resumed on a route. Default slog.Default() at New.
	Logger *slog.Logger
	// LogInterval lets at most one log of a kind of upstream failure on one
	// endpoint through per interval; the next one says how many were left
	// out. Default DefaultLogInterval; negative fails New.
	LogInterval time.Duration
	// TLS, when set, is the pooled transport's client TLS configuration: a
	// private CA, client certificates. Default: the system's roots.
	TLS *tls.Config
	// Transport, when set, replaces the pooled HTTP transport (tests, unix
	// sockets, proxies); TLS then does not apply. It is still wrapped for
	// tracing.
	Transport http.RoundTripper
}

// PackConfig configures packed chat batching: short chat requests of one
// batch that share their parameters and system prompt go upstream as one
// call (package pack), and the answers are routed back.
//
// A request is packed only when it is a single user turn after any system
// messages, has no stop sequences (they could cut the JSON reply), and its
// estimated tokens (prompt plus max_tokens) fit MaxTokens.
type PackConfig struct {
	// Enabled turns packing on for the routes in Routes.
	Enabled bool
	// Routes lists the routes (the names callers use) whose batches are
	// packed. Empty: every chat route of this backend.
	Routes []string
	// MaxItems caps the requests in one pack. Default DefaultPackMaxItems;
	// 2 to pack.MaxItems.
	MaxItems int
	// MaxTokens caps a pack's estimated tokens: its requests' prompts and
	// max_tokens. Default DefaultPackMaxTokens; positive.
	MaxTokens int
	// ResponseFormat is FormatJSONSchema (default), FormatJSONObject or
	// FormatNone, for upstreams without structured output.
	ResponseFormat string
	// PauseAfter: when this many packs of a route fail in a row (their
	// requests are re-sent singly whatever the failure), the route stops
	// packing for PauseFor, and a warning says so. Default
	// DefaultPackPauseAfter; negative: never pause.
	PauseAfter int
	// PauseFor is how long a route's packing pauses. Default
	// DefaultPackPauseFor; negative fails New.
	PauseFor time.Duration
}

// config is a Config with every default resolved and the key read.
type config struct {
	Config
	base   *url.URL
	apiKey string
	routes map[string]bool // nil: every route
}

func resolve(c Config) (*config, error) {
	var errs []error
	rc := &config{Config: c}
	switch u, err := url.Parse(c.BaseURL); {
	case c.BaseURL == "":
		errs = append(errs, errors.New("openai: BaseURL: must be set"))
	case err != nil:
		errs = append(errs, fmt.Errorf("openai: BaseURL: %w", err))
	case u.Scheme != "http" && u.Scheme != "https":
		errs = append(errs, fmt.Errorf("openai: BaseURL: scheme must be http or https, got %q", u.Scheme))
	case u.Host == "":
		errs = append(errs, errors.New("openai: BaseURL: must name a host"))
	case u.User != nil:
		errs = append(errs, errors.New("openai: BaseURL: must not carry credentials; use APIKeyEnv"))
	default:
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawPath = ""
		u.Fragment = ""
		rc.base = u
	}
	if c.APIKeyEnv != "" {
		lookup := c.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		rc.apiKey, _ = lookup(c.APIKeyEnv)
		if rc.apiKey == "" {
			errs = append(errs, fmt.Errorf("openai: APIKeyEnv: environment variable %s is empty or unset", c.APIKeyEnv))
		}
	}
	if rc.APIKeyHeader == "" {
		rc.APIKeyHeader = "Authorization"
	}
	if !httpguts.ValidHeaderFieldName(rc.APIKeyHeader) {
		errs = append(errs, fmt.Errorf("openai: APIKeyHeader: bad header name %q", rc.APIKeyHeader))
	}
	for k, v := range c.Headers {
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			errs = append(errs, fmt.Errorf("openai: Headers: bad header name %q", k))
		case !httpguts.ValidHeaderFieldValue(v):
			errs = append(errs, fmt.Errorf("openai: Headers[%s]: value must not hold control characters", k))
		case http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(rc.APIKeyHeader) && rc.apiKey != "":
			errs = append(errs, fmt.Errorf("openai: Headers[%s]: carries the API key; use APIKeyEnv", k))
		}
	}
	if strings.ContainsAny(c.Organization+c.Project, "\r\n") {
		errs = append(errs, errors.New("openai: Organization, Project: must not hold a line break"))
	}
	if rc.Timeout == 0 {
		rc.Timeout = DefaultTimeout
	}
	if rc.Timeout < 0 {
		errs = append(errs, fmt.Errorf("openai: Timeout: must be positive, got %v", c.Timeout))
	}
	if rc.MaxResponseBytes == 0 {
		rc.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if rc.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("openai: MaxResponseBytes: must be positive, got %d", c.MaxResponseBytes))
	}
	if rc.MaxFanOut == 0 {
		rc.MaxFanOut = DefaultMaxFanOut
	}
	if rc.MaxFanOut < 0 {
		errs = append(errs, fmt.Errorf("openai: MaxFanOut: must be positive, got %d", c.MaxFanOut))
	}
	if rc.MaxIdleConns == 0 {
		rc.MaxIdleConns = DefaultMaxIdleConns
	}
	if rc.MaxIdleConns < 0 {
		errs = append(errs, fmt.Errorf("openai: MaxIdleConns: must be positive, got %d", c.MaxIdleConns))
	}
	switch rc.MaxTokensField {
	case "":
		rc.MaxTokensField = "max_tokens"
	case "max_tokens", "max_completion_tokens":
	default:
		errs = append(errs, fmt.Errorf("openai: MaxTokensField: must be max_tokens or max_completion_tokens, got %q", c.MaxTokensField))
	}
	p := &rc.Pack
	if p.MaxItems == 0 {
		p.MaxItems = DefaultPackMaxItems
	}
	if p.MaxItems < 2 || p.MaxItems > pack.MaxItems {
		errs = append(errs, fmt.Errorf("openai: Pack.MaxItems: must be 2 to %d, got %d", pack.MaxItems, c.Pack.MaxItems))
	}
	if p.MaxTokens == 0 {
		p.MaxTokens = DefaultPackMaxTokens
	}
	if p.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("openai: Pack.MaxTokens: must be positive, got %d", c.Pack.MaxTokens))
	}
	switch p.ResponseFormat {
	case "":
		p.ResponseFormat = DefaultResponseFormat
	case FormatJSONSchema, FormatJSONObject, FormatNone:
	default:
		errs = append(errs, fmt.Errorf("openai: Pack.ResponseFormat: must be %s, %s or %s, got %q", FormatJSONSchema, FormatJSONObject, FormatNone, p.ResponseFormat))
	}
	if p.PauseAfter == 0 {
		p.PauseAfter = DefaultPackPauseAfter
	}
	if p.PauseFor == 0 {
		p.PauseFor = DefaultPackPauseFor
	}
	if p.PauseFor < 0 {
		errs = append(errs, fmt.Errorf("openai: Pack.PauseFor: must be positive, got %v", c.Pack.PauseFor))
	}
	if rc.Logger == nil {
		rc.Logger = slog.Default()
	}
	if rc.LogInterval == 0 {
		rc.LogInterval = DefaultLogInterval
	}
	if rc.LogInterval < 0 {
		errs = append(errs, fmt.Errorf("openai: LogInterval: must be positive, got %v", c.LogInterval))
	}
	if len(p.Routes) > 0 {
		rc.routes = make(map[string]bool, len(p.Routes))
		for i, r := range p.Routes {
			if r == "" {
				errs = append(errs, fmt.Errorf("openai: Pack.Routes[%d]: must not be empty", i))
			}
			rc.routes[r] = true
		}
	}
	if rc.Propagator == nil {
		rc.Propagator = propagation.TraceContext{}
	}
	return rc, errors.Join(errs...)
}

// packs reports whether route's chat batches are packed.
func (c *config) packs(route string) bool {
	return c.Pack.Enabled && (c.routes == nil || c.routes[route])
}

// endpointPath returns the URL path of path under the base URL, without
// host or query: what messages and logs name.
func (c *config) endpointPath(path string) string { return c.base.Path + path }

// endpoint returns the URL of path under the base URL.
func (c *config) endpoint(path string) string {
	u := *c.base
	u.Path += path
	return u.String()
}
