package anthropic

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

	"github.com/batcherhq/batcher/batcher"
)

// Defaults.
const (
	// DefaultBaseURL is Anthropic's API root, the part before /v1/messages.
	DefaultBaseURL = "https://api.anthropic.com"
	// DefaultVersion is the anthropic-version header sent on every call.
	DefaultVersion          = "2023-06-01"
	DefaultTimeout          = 10 * time.Minute // Anthropic's own non-streaming limit
	DefaultMaxResponseBytes = 32 << 20
	DefaultMaxFanOut        = 16
	// DefaultMaxIdleConns is 256, as the OpenAI backend's: each streamed
	// answer holds a connection of its own, and a pool smaller than the
	// streams in flight makes the next ones redial before their first
	// token.
	DefaultMaxIdleConns = 256
	// DefaultMaxTokens is the max_tokens of a call whose batch carries
	// none (Anthropic requires one). Through the core it never applies:
	// every batch carries its request's max_tokens or its route's
	// default_max_tokens.
	DefaultMaxTokens = 1024
	// DefaultLogInterval spaces the logs of one kind of upstream failure.
	DefaultLogInterval = 10 * time.Second
)

// Config configures one Anthropic Messages API upstream.
type Config struct {
	// BaseURL is the API's root, the part before /v1/messages. Default
	// DefaultBaseURL.
	BaseURL string
	// APIKeyEnv names the environment variable that holds the API key,
	// read once by New and sent as x-api-key. Empty: no key (a local
	// simulator or a gateway that adds it). Set but empty fails New.
	APIKeyEnv string
	// LookupEnv reads APIKeyEnv. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Version is the anthropic-version header. Default DefaultVersion.
	Version string
	// Beta, when set, goes out as the anthropic-beta header (a
	// comma-separated list of beta features).
	Beta string
	// Headers are sent on every call. They may not set x-api-key,
	// anthropic-version or anthropic-beta (the fields above do).
	Headers map[string]string
	// MaxTokens is the max_tokens of a call whose batch carries none.
	// Default DefaultMaxTokens; negative fails New.
	MaxTokens int32
	// Timeout bounds one upstream call, body included (a streamed call:
	// the wait for its headers). Default DefaultTimeout; negative fails
	// New.
	Timeout time.Duration
	// MaxResponseBytes bounds a response body. Default
	// DefaultMaxResponseBytes; negative fails New.
	MaxResponseBytes int64
	// MaxFanOut bounds the concurrent upstream calls of one batch.
	// Default DefaultMaxFanOut; negative fails New.
	MaxFanOut int
	// MaxIdleConns bounds the idle keep-alive connections. Default
	// DefaultMaxIdleConns; negative fails New.
	MaxIdleConns int

	// TracerProvider makes the spans of upstream calls. Default: the
	// global provider.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into outgoing calls. Default
	// W3C traceparent only.
	Propagator propagation.TextMapPropagator
	// OnRateLimit, when set, receives what every answer, success or not,
	// says about the upstream's limits (anthropic-ratelimit-*,
	// retry-after). It must be quick and safe for concurrent use.
	OnRateLimit func(batcher.RateLimitInfo)
	// Logger receives the backend's logs of upstream failures. Default
	// slog.Default() at New.
	Logger *slog.Logger
	// LogInterval lets at most one log of a kind of upstream failure
	// through per interval. Default DefaultLogInterval; negative fails New.
	LogInterval time.Duration
	// TLS, when set, is the pooled transport's client TLS configuration.
	TLS *tls.Config
	// Transport, when set, replaces the pooled HTTP transport (tests,
	// proxies); TLS then does not apply. It is still wrapped for tracing.
	Transport http.RoundTripper
}

// config is a Config with every default resolved and the key read.
type config struct {
	Config
	base   *url.URL
	apiKey string
}

// A FieldError is a bad Config setting: the field's name in Go's words
// and why, starting with "must".
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return "anthropic: " + e.Field + ": " + e.Reason }

// Validate checks c's settings as New does, without reading the API key
// from the environment (errors.Join of *FieldError).
func Validate(c Config) error {
	_, err := resolve(c, false)
	return err
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// versionRE is what an anthropic-version looks like: a date.
var versionRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// reservedHeaders are the headers the backend sets itself.
var reservedHeaders = []string{"X-Api-Key", "Anthropic-Version", "Anthropic-Beta", "Authorization", "Content-Type"}

func resolve(c Config, readKey bool) (*config, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	rc := &config{Config: c}
	if rc.BaseURL == "" {
		rc.BaseURL = DefaultBaseURL
	}
	switch u, err := url.Parse(rc.BaseURL); {
	case err != nil:
		bad("BaseURL", "must be a URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		bad("BaseURL", "must use scheme http or https, got %q", u.Scheme)
	case u.Host == "":
		bad("BaseURL", "must name a host, got %q", rc.BaseURL)
	case u.User != nil:
		bad("BaseURL", "must not carry credentials: the API key comes from the environment")
	case u.RawQuery != "":
		bad("BaseURL", "must not carry a query")
	default:
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawPath, u.Fragment = "", ""
		rc.base = u
	}
	if c.APIKeyEnv != "" {
		if !envNameRE.MatchString(c.APIKeyEnv) {
			bad("APIKeyEnv", "must be an environment variable name such as ANTHROPIC_API_KEY, got %q", c.APIKeyEnv)
		} else if readKey {
			lookup := c.LookupEnv
			if lookup == nil {
				lookup = os.LookupEnv
			}
			rc.apiKey, _ = lookup(c.APIKeyEnv)
			if rc.apiKey == "" {
				errs = append(errs, fmt.Errorf("anthropic: APIKeyEnv: environment variable %s is empty or unset", c.APIKeyEnv))
			}
		}
	}
	if rc.Version == "" {
		rc.Version = DefaultVersion
	} else if !versionRE.MatchString(rc.Version) {
		bad("Version", "must be an anthropic-version date such as %s, got %q", DefaultVersion, c.Version)
	}
	if !httpguts.ValidHeaderFieldValue(c.Beta) {
		bad("Beta", "must not hold control characters")
	}
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		field := fmt.Sprintf("Headers[%q]", k)
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			bad(field, "must be an HTTP header name")
		case !httpguts.ValidHeaderFieldValue(c.Headers[k]):
			bad(field, "must not hold control characters")
		case slices.Contains(reservedHeaders, http.CanonicalHeaderKey(k)):
			bad(field, "must not be a header the backend sets itself (%s)", strings.Join(reservedHeaders, ", "))
		}
	}
	rc.MaxTokens = orDefault(rc.MaxTokens, DefaultMaxTokens, "MaxTokens", bad)
	rc.Timeout = orDefault(rc.Timeout, DefaultTimeout, "Timeout", bad)
	rc.MaxResponseBytes = orDefault(rc.MaxResponseBytes, DefaultMaxResponseBytes, "MaxResponseBytes", bad)
	rc.MaxFanOut = orDefault(rc.MaxFanOut, DefaultMaxFanOut, "MaxFanOut", bad)
	rc.MaxIdleConns = orDefault(rc.MaxIdleConns, DefaultMaxIdleConns, "MaxIdleConns", bad)
	rc.LogInterval = orDefault(rc.LogInterval, DefaultLogInterval, "LogInterval", bad)
	if rc.Logger == nil {
		rc.Logger = slog.Default()
	}
	if rc.Propagator == nil {
		rc.Propagator = propagation.TraceContext{}
	}
	return rc, errors.Join(errs...)
}

// orDefault returns v, or def when v is 0, reporting a negative v.
func orDefault[T int | int32 | int64 | time.Duration](v, def T, field string, bad func(string, string, ...any)) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		bad(field, "must not be negative, got %v (0 takes the default, %v)", v, def)
	}
	return v
}

// endpointPath is the URL path of path under the base URL: what messages
// and logs name.
func (c *config) endpointPath(path string) string {
	path, _, _ = strings.Cut(path, "?")
	return c.base.Path + path
}

// endpoint returns the URL of path (with its query after a ?) under the
// base URL.
func (c *config) endpoint(path string) string {
	u := *c.base
	path, q, _ := strings.Cut(path, "?")
	u.Path += path
	if q != "" {
		u.RawQuery = q
	}
	return u.String()
}
