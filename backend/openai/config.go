package openai

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
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
	// DefaultMaxIdleConns is 256, not 64: over HTTP/1.1 each streamed
	// answer holds a connection of its own, and an idle pool smaller than
	// the streams in flight closes the surplus at each answer's end, so the
	// next ones pay a new connection (a TLS handshake upstream) before
	// their first token.
	DefaultMaxIdleConns  = 256
	DefaultPackMaxItems  = 10
	DefaultPackMaxTokens = 4096
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
	// eps holds the URL and URL path of each model endpoint, made once
	// (endpoint, endpointPath); nil when BaseURL is bad.
	eps map[string]endpointURLs
}

// endpointURLs is an endpoint's URL and its URL path.
type endpointURLs struct{ url, path string }

// modelPaths are the endpoints every call to a model goes to.
var modelPaths = []string{"/chat/completions", "/completions", "/embeddings"}

// A FieldError is a bad Config setting: the field's path in Go's words
// (BaseURL, Headers["X-Team"], Pack.MaxItems) and why, starting with
// "must".
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return "openai: " + e.Field + ": " + e.Reason }

// Validate checks c's settings as New does, without reading the API key
// from the environment or building anything, so that a program loading a
// config file can report every bad setting at once under its own names
// (errors.Join of *FieldError). Whether APIKeyEnv's variable is set is
// New's to check.
func Validate(c Config) error {
	_, err := resolve(c, false)
	return err
}

// envNameRE is what a shell accepts as a variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// resolve checks c and fills in its defaults; readKey also reads the API
// key from the environment, failing when it is empty.
func resolve(c Config, readKey bool) (*config, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	rc := &config{Config: c}
	rc.base = resolveBaseURL(c.BaseURL, bad)
	if rc.base != nil {
		rc.eps = make(map[string]endpointURLs, len(modelPaths))
		for _, p := range modelPaths {
			rc.eps[p] = endpointURLs{rc.buildEndpoint(p), rc.base.Path + p}
		}
	}
	rc.resolveAuth(readKey, bad, func(err error) { errs = append(errs, err) })
	// 0 takes the default; below 0 is an error.
	rc.Timeout = orDefault(rc.Timeout, DefaultTimeout, "Timeout", bad)
	rc.MaxResponseBytes = orDefault(rc.MaxResponseBytes, DefaultMaxResponseBytes, "MaxResponseBytes", bad)
	rc.MaxFanOut = orDefault(rc.MaxFanOut, DefaultMaxFanOut, "MaxFanOut", bad)
	rc.MaxIdleConns = orDefault(rc.MaxIdleConns, DefaultMaxIdleConns, "MaxIdleConns", bad)
	rc.LogInterval = orDefault(rc.LogInterval, DefaultLogInterval, "LogInterval", bad)
	switch rc.MaxTokensField {
	case "":
		rc.MaxTokensField = "max_tokens"
	case "max_tokens", "max_completion_tokens":
	default:
		bad("MaxTokensField", "must be max_tokens or max_completion_tokens, got %q", c.MaxTokensField)
	}
	rc.resolvePack(bad)
	if rc.Logger == nil {
		rc.Logger = slog.Default()
	}
	if rc.Propagator == nil {
		rc.Propagator = propagation.TraceContext{}
	}
	return rc, errors.Join(errs...)
}

// resolveBaseURL checks BaseURL and returns it without a trailing slash,
// or nil when it is bad.
func resolveBaseURL(base string, bad func(string, string, ...any)) *url.URL {
	switch u, err := url.Parse(base); {
	case base == "":
		bad("BaseURL", "must be set, for example https://api.openai.com/v1")
	case err != nil:
		bad("BaseURL", "must be a URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		bad("BaseURL", "must use scheme http or https, got %q", u.Scheme)
	case u.Host == "":
		bad("BaseURL", "must name a host, got %q", base)
	case u.User != nil:
		bad("BaseURL", "must not carry credentials: the API key comes from the environment")
	default:
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawPath = ""
		u.Fragment = ""
		return u
	}
	return nil
}

// resolveAuth checks the API key's variable and header and the headers
// sent with every call, and reads the key when readKey is set (fail
// reports an empty one).
func (rc *config) resolveAuth(readKey bool, bad func(string, string, ...any), fail func(error)) {
	c := &rc.Config
	if c.APIKeyEnv != "" {
		if !envNameRE.MatchString(c.APIKeyEnv) {
			bad("APIKeyEnv", "must be an environment variable name such as OPENAI_API_KEY, got %q", c.APIKeyEnv)
		} else if readKey {
			lookup := c.LookupEnv
			if lookup == nil {
				lookup = os.LookupEnv
			}
			rc.apiKey, _ = lookup(c.APIKeyEnv)
			if rc.apiKey == "" {
				fail(fmt.Errorf("openai: APIKeyEnv: environment variable %s is empty or unset", c.APIKeyEnv))
			}
		}
	}
	if rc.APIKeyHeader == "" {
		rc.APIKeyHeader = "Authorization"
	}
	if !httpguts.ValidHeaderFieldName(rc.APIKeyHeader) {
		bad("APIKeyHeader", "must be an HTTP header name, got %q", rc.APIKeyHeader)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		field := fmt.Sprintf("Headers[%q]", k)
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			bad(field, "must be an HTTP header name")
		case !httpguts.ValidHeaderFieldValue(c.Headers[k]):
			bad(field, "must not hold control characters")
		case c.APIKeyEnv != "" && http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(rc.APIKeyHeader):
			bad(field, "must not be the API key's header: the key comes from the environment variable %s", c.APIKeyEnv)
		}
	}
	if !httpguts.ValidHeaderFieldValue(c.Organization) {
		bad("Organization", "must not hold control characters")
	}
	if !httpguts.ValidHeaderFieldValue(c.Project) {
		bad("Project", "must not hold control characters")
	}
}

// resolvePack checks Pack and fills in its defaults.
func (rc *config) resolvePack(bad func(string, string, ...any)) {
	p := &rc.Pack
	if p.MaxItems == 0 {
		p.MaxItems = DefaultPackMaxItems
	}
	if p.MaxItems < 2 || p.MaxItems > pack.MaxItems {
		bad("Pack.MaxItems", "must be 2 to %d, got %d", pack.MaxItems, p.MaxItems)
	}
	p.MaxTokens = orDefault(p.MaxTokens, DefaultPackMaxTokens, "Pack.MaxTokens", bad)
	p.PauseFor = orDefault(p.PauseFor, DefaultPackPauseFor, "Pack.PauseFor", bad)
	switch p.ResponseFormat {
	case "":
		p.ResponseFormat = DefaultResponseFormat
	case FormatJSONSchema, FormatJSONObject, FormatNone:
	default:
		bad("Pack.ResponseFormat", "must be %s, %s or %s, got %q", FormatJSONSchema, FormatJSONObject, FormatNone, p.ResponseFormat)
	}
	if p.PauseAfter == 0 {
		p.PauseAfter = DefaultPackPauseAfter
	}
	if len(p.Routes) > 0 {
		rc.routes = make(map[string]bool, len(p.Routes))
		for i, r := range p.Routes {
			switch {
			case r == "":
				bad(fmt.Sprintf("Pack.Routes[%d]", i), "must not be empty")
			case rc.routes[r]:
				bad(fmt.Sprintf("Pack.Routes[%d]", i), "must not list %q twice", r)
			}
			rc.routes[r] = true
		}
	}
}

// orDefault returns v, or def when v is 0, reporting a negative v.
func orDefault[T int | int64 | time.Duration](v, def T, field string, bad func(string, string, ...any)) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		bad(field, "must not be negative, got %v (0 takes the default, %v)", v, def)
	}
	return v
}

// packs reports whether route's chat batches are packed.
func (c *config) packs(route string) bool {
	return c.Pack.Enabled && (c.routes == nil || c.routes[route])
}

// endpointPath returns the URL path of path under the base URL, without
// host or query: what messages and logs name.
func (c *config) endpointPath(path string) string {
	if e, ok := c.eps[path]; ok {
		return e.path
	}
	return c.base.Path + path
}

// endpoint returns the URL of path under the base URL.
func (c *config) endpoint(path string) string {
	if e, ok := c.eps[path]; ok {
		return e.url
	}
	return c.buildEndpoint(path)
}

func (c *config) buildEndpoint(path string) string {
	u := *c.base
	u.Path += path
	return u.String()
}
