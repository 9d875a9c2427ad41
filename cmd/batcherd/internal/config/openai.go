package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"unicode"

	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/backend/openai"
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
	// MaxIdleConns bounds the idle keep-alive connections. Default 256.
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

// validate has openai.Validate check o, adding each error under its YAML
// path (path is "backends[i].openai"), and checks what the package cannot
// see: that pack.routes name chat routes served by this backend, and the
// TLS section. Whether api_key_env's variable is set is checkEnv's.
func (o *OpenAI) validate(path, backend string, c *Config, e *errs) {
	for _, err := range unjoin(openai.Validate(o.config(nil))) {
		var fe *openai.FieldError
		if !errors.As(err, &fe) {
			e.add(path, "%v", err)
			continue
		}
		*e = append(*e, fmt.Errorf("%s.%s: %s", path, yamlPath(fe.Field), fe.Reason))
	}
	for i, name := range o.Pack.Routes {
		rp := fmt.Sprintf("%s.pack.routes[%d]", path, i)
		switch r := c.route(name); {
		case name == "" || slices.Index(o.Pack.Routes, name) < i:
			// openai.Validate's
		case r == nil:
			e.add(rp, "no route named %q", name)
		case r.Operation != "chat":
			e.add(rp, "route %q is a %s route: only chat is packed", name, r.Operation)
		case !r.uses(backend):
			e.add(rp, "route %q does not send to backend %q, as its backend or a fallback", name, backend)
		}
	}
	if t := o.TLS; t != nil {
		if u, err := url.Parse(o.BaseURL); err == nil && u.Scheme != "https" && u.Scheme != "" {
			e.add(path+".tls", "only for an https base_url, got scheme %q", u.Scheme)
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			e.add(path+".tls", "cert_file and key_file go together: both or neither")
		}
	}
}

// yamlPath turns openai.Config's Go field path into the YAML one:
// Pack.MaxItems → pack.max_items, Headers["X-A"] → headers["X-A"].
func yamlPath(goPath string) string {
	parts := strings.Split(goPath, ".")
	for i, p := range parts {
		name, index, _ := strings.Cut(p, "[")
		if index != "" {
			index = "[" + index
		}
		parts[i] = snake(name) + index
	}
	return strings.Join(parts, ".")
}

// snake turns a Go name into snake case, keeping initialisms whole:
// BaseURL → base_url, APIKeyEnv → api_key_env.
func snake(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
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

// checkEnv reports the openai and anthropic backends whose api_key_env names a variable
// that lookupEnv finds empty or unset: openai.New would fail on them.
func (c *Config) checkEnv(lookupEnv func(string) (string, bool)) error {
	var e errs
	for i, b := range c.Backends {
		if b.Type == TypeAnthropic && b.Anthropic != nil && b.Anthropic.APIKeyEnv != "" {
			if v, _ := lookupEnv(b.Anthropic.APIKeyEnv); v == "" {
				e.add(fmt.Sprintf("backends[%d].anthropic.api_key_env", i), "environment variable %s is empty or unset", b.Anthropic.APIKeyEnv)
			}
		}
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
	c := o.config(tp)
	if o.TLS != nil {
		tc, err := o.TLS.config()
		if err != nil {
			return c, err
		}
		c.TLS = tc
	}
	return c, nil
}

// config is o as openai.Config, without its TLS files.
func (o *OpenAI) config(tp trace.TracerProvider) openai.Config {
	return openai.Config{
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
