package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/backend/openai/pack"
)

// OpenAI configures a backend of type openai (package backend/openai): an
// OpenAI-compatible HTTP API such as OpenAI, Azure OpenAI, vLLM, Ollama or
// llama.cpp's server. Each field maps onto the openai.Config field of the
// same name; 0 or empty takes the package's default.
type OpenAI struct {
	// BaseURL is the part before /chat/completions, for example
	// https://api.openai.com/v1 or http://127.0.0.1:11434/v1. Required.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the API key, read at
	// start. Empty: no key (local servers). The key never sits in the file.
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKeyHeader carries the key. Default Authorization, as "Bearer
	// <key>"; any other header (Azure's api-key) carries the bare key.
	APIKeyHeader string `yaml:"api_key_header"`
	// Headers are sent on every call; they may not carry the key.
	Headers map[string]string `yaml:"headers"`
	// Organization and Project go out as OpenAI-Organization and
	// OpenAI-Project.
	Organization string `yaml:"organization"`
	Project      string `yaml:"project"`
	// Timeout bounds one upstream HTTP call, body included. Default
	// openai.DefaultTimeout (60s). The core's attempt_timeout bounds the
	// whole attempt too; the shorter wins.
	Timeout Duration `yaml:"timeout"`
	// MaxResponseBytes bounds a response body. Default 32 MiB.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// MaxFanOut bounds the concurrent upstream calls of one chat batch.
	// Default 16.
	MaxFanOut int `yaml:"max_fan_out"`
	// MaxIdleConns bounds the idle keep-alive connections. Default 64.
	MaxIdleConns int `yaml:"max_idle_conns"`
	// MaxTokensField is max_tokens (default) or max_completion_tokens
	// (OpenAI's reasoning models).
	MaxTokensField string `yaml:"max_tokens_field"`
	// Pack configures packed chat batching; off by default.
	Pack Pack `yaml:"pack"`
	// TLS, for an https base_url, trusts a private CA or presents a client
	// certificate.
	TLS *TLS `yaml:"tls"`
}

// Pack configures packed chat batching (openai.PackConfig): short chat
// requests of one batch go upstream as one call whose JSON reply is routed
// back.
type Pack struct {
	Enabled bool `yaml:"enabled"`
	// Routes lists the chat routes whose batches are packed, by the names
	// callers use; each must send chat to this backend, as its backend or a
	// fallback. Empty: every chat route of this backend.
	Routes []string `yaml:"routes"`
	// MaxItems caps the requests in one pack: 2 to 1000, default 10.
	MaxItems int `yaml:"max_items"`
	// MaxTokens caps a pack's estimated tokens. Default 4096.
	MaxTokens int `yaml:"max_tokens"`
	// ResponseFormat is json_schema (default), json_object or none, for
	// upstreams without structured output.
	ResponseFormat string `yaml:"response_format"`
	// PauseAfter packs of a route failing in a row stop its packing for
	// PauseFor (their requests are re-sent singly). Default 3; negative:
	// never pause.
	PauseAfter int `yaml:"pause_after"`
	// PauseFor is how long a route's packing pauses. Default 1m.
	PauseFor Duration `yaml:"pause_for"`
}

// TLS is an openai backend's client TLS: PEM files read at start.
type TLS struct {
	// CAFile holds CA certificates trusted besides the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key; both or
	// neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

var (
	// envNameRE is what a shell accepts as a variable name.
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// tokenRE is an HTTP header name (RFC 9110 token).
	tokenRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// validate checks o as openai.New would, so that errors name their YAML
// paths, and checks what openai.New cannot see: that pack.routes name chat
// routes served by this backend. path is "backends[i].openai". The API
// key's presence in the environment is checked by checkEnv.
func (o *OpenAI) validate(path, backend string, c *Config, e *errs) {
	switch u, err := url.Parse(o.BaseURL); {
	case o.BaseURL == "":
		e.add(path+".base_url", "must be set, for example https://api.openai.com/v1")
	case err != nil:
		e.add(path+".base_url", "not a URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		e.add(path+".base_url", "scheme must be http or https, got %q", u.Scheme)
	case u.Host == "":
		e.add(path+".base_url", "must name a host, got %q", o.BaseURL)
	case u.User != nil:
		e.add(path+".base_url", "must not carry credentials: put the key in the environment variable named by api_key_env")
	case o.TLS != nil && u.Scheme != "https":
		e.add(path+".tls", "only for an https base_url, got scheme %q", u.Scheme)
	}
	if o.APIKeyEnv != "" && !envNameRE.MatchString(o.APIKeyEnv) {
		e.add(path+".api_key_env", "must be an environment variable name such as OPENAI_API_KEY, got %q", o.APIKeyEnv)
	}
	keyHeader := o.APIKeyHeader
	if keyHeader == "" {
		keyHeader = "Authorization"
	} else if !tokenRE.MatchString(keyHeader) {
		e.add(path+".api_key_header", "must be an HTTP header name, got %q", keyHeader)
	}
	for _, k := range sortedKeys(o.Headers) {
		hp := fmt.Sprintf("%s.headers[%q]", path, k)
		switch v := o.Headers[k]; {
		case !tokenRE.MatchString(k):
			e.add(hp, "not an HTTP header name")
		case hasControl(v):
			e.add(hp, "value must not hold control characters")
		case o.APIKeyEnv != "" && http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(keyHeader):
			e.add(hp, "is the API key's header; the key comes from api_key_env %s", o.APIKeyEnv)
		}
	}
	if hasControl(o.Organization) {
		e.add(path+".organization", "must not hold control characters")
	}
	if hasControl(o.Project) {
		e.add(path+".project", "must not hold control characters")
	}
	if o.Timeout < 0 {
		e.add(path+".timeout", "must be positive, got %v", o.Timeout)
	}
	if o.MaxResponseBytes < 0 {
		e.add(path+".max_response_bytes", "must not be negative, got %d", o.MaxResponseBytes)
	}
	if o.MaxFanOut < 0 {
		e.add(path+".max_fan_out", "must not be negative, got %d", o.MaxFanOut)
	}
	if o.MaxIdleConns < 0 {
		e.add(path+".max_idle_conns", "must not be negative, got %d", o.MaxIdleConns)
	}
	switch o.MaxTokensField {
	case "", "max_tokens", "max_completion_tokens":
	default:
		e.add(path+".max_tokens_field", "must be max_tokens or max_completion_tokens, got %q", o.MaxTokensField)
	}

	p, pp := &o.Pack, path+".pack"
	if p.MaxItems != 0 && (p.MaxItems < 2 || p.MaxItems > pack.MaxItems) {
		e.add(pp+".max_items", "must be 2 to %d, got %d", pack.MaxItems, p.MaxItems)
	}
	if p.MaxTokens < 0 {
		e.add(pp+".max_tokens", "must not be negative, got %d", p.MaxTokens)
	}
	if p.PauseFor < 0 {
		e.add(pp+".pause_for", "must be positive, got %v", p.PauseFor)
	}
	switch p.ResponseFormat {
	case "", openai.FormatJSONSchema, openai.FormatJSONObject, openai.FormatNone:
	default:
		e.add(pp+".response_format", "must be %s, %s or %s, got %q",
			openai.FormatJSONSchema, openai.FormatJSONObject, openai.FormatNone, p.ResponseFormat)
	}
	for i, name := range p.Routes {
		rp := fmt.Sprintf("%s.routes[%d]", pp, i)
		r := c.route(name)
		switch {
		case name == "":
			e.add(rp, "must not be empty")
		case slices.Index(p.Routes, name) < i:
			e.add(rp, "%q is listed twice", name)
		case r == nil:
			e.add(rp, "no route named %q", name)
		case r.Operation != "chat":
			e.add(rp, "route %q is a %s route: only chat is packed", name, r.Operation)
		case !r.uses(backend):
			e.add(rp, "route %q does not send to backend %q, as its backend or a fallback", name, backend)
		}
	}

	if t := o.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		e.add(path+".tls", "cert_file and key_file go together: both or neither")
	}
}

// route returns the route named name, or nil.
func (c *Config) route(name string) *Route {
	for i := range c.Routes {
		if c.Routes[i].Name == name {
			return &c.Routes[i]
		}
	}
	return nil
}

// uses reports whether r sends work to backend, first or as a fallback.
func (r *Route) uses(backend string) bool {
	if r.Backend == backend {
		return true
	}
	for _, f := range r.Fallbacks {
		if f.Backend == backend {
			return true
		}
	}
	return false
}

// checkEnv reports the openai backends whose api_key_env names a variable
// that lookupEnv finds empty or unset: openai.New would fail on them.
func (c *Config) checkEnv(lookupEnv func(string) (string, bool)) error {
	var e errs
	for i, b := range c.Backends {
		if b.Type != TypeOpenAI || b.OpenAI == nil || b.OpenAI.APIKeyEnv == "" {
			continue
		}
		if v, _ := lookupEnv(b.OpenAI.APIKeyEnv); v == "" {
			e.add(fmt.Sprintf("backends[%d].openai.api_key_env", i), "environment variable %s is empty or unset", b.OpenAI.APIKeyEnv)
		}
	}
	return errors.Join(e...)
}

// openaiConfig returns the openai.Config for o, reading its TLS files.
func (o *OpenAI) openaiConfig(tp trace.TracerProvider) (openai.Config, error) {
	c := openai.Config{
		BaseURL:          o.BaseURL,
		APIKeyEnv:        o.APIKeyEnv,
		APIKeyHeader:     o.APIKeyHeader,
		Headers:          o.Headers,
		Organization:     o.Organization,
		Project:          o.Project,
		Timeout:          o.Timeout.D(),
		MaxResponseBytes: o.MaxResponseBytes,
		MaxFanOut:        o.MaxFanOut,
		MaxIdleConns:     o.MaxIdleConns,
		MaxTokensField:   o.MaxTokensField,
		Pack: openai.PackConfig{
			Enabled:        o.Pack.Enabled,
			Routes:         o.Pack.Routes,
			MaxItems:       o.Pack.MaxItems,
			MaxTokens:      o.Pack.MaxTokens,
			ResponseFormat: o.Pack.ResponseFormat,
			PauseAfter:     o.Pack.PauseAfter,
			PauseFor:       o.Pack.PauseFor.D(),
		},
		TracerProvider: tp,
	}
	if o.TLS != nil {
		tc, err := o.TLS.config()
		if err != nil {
			return c, err
		}
		c.TLS = tc
	}
	return c, nil
}

func (t *TLS) config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// hasControl reports whether s holds a control character other than tab,
// which no HTTP header value may.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f })
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
