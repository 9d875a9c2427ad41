package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/openaiapi"
	"github.com/batcherhq/batcher/security"
)

// DefaultHTTPListen is the OpenAI-compatible HTTP front door's address.
const DefaultHTTPListen = "127.0.0.1:8081"

// ListenOff as an optional listener's address (http.listen,
// telemetry.admin_listen) turns that listener off.
const ListenOff = "off"

// HTTPOff as http.listen turns the HTTP front door off.
const HTTPOff = ListenOff

// maxTokensFile bounds the tokens file.
const maxTokensFile = 1 << 20

// HTTP configures the OpenAI-compatible HTTP front door (package
// openaiapi). 0 or empty takes the package's default.
type HTTP struct {
	// Listen is host:port, or "off". Without tokens it must be a loopback
	// address: batcherd refuses to serve the API unauthenticated to the
	// network.
	Listen string `yaml:"listen"`
	// TokensEnv names an environment variable holding the accepted bearer
	// tokens, comma-separated; TokensFile a file holding them, one a line.
	// Either or both; none: no authentication (loopback only). Tokens never
	// sit in this file and are never logged.
	TokensEnv  string `yaml:"tokens_env"`
	TokensFile string `yaml:"tokens_file"`
	// MaxBodyBytes bounds a JSON request body. Default 16 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxFileBytes bounds an uploaded file. Default 100 MiB.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxJSONDepth bounds a JSON body's nesting. Default 64.
	MaxJSONDepth int `yaml:"max_json_depth"`
	// MaxInputs bounds the items of one embeddings input or completions
	// prompt. Default 2048.
	MaxInputs int `yaml:"max_inputs"`
	// DefaultTimeout bounds a call whose client sent no timeout header.
	// Default 0: the queue timeout alone.
	DefaultTimeout Duration `yaml:"default_timeout"`
}

// The settings the environment and flags may set for the front door and
// the data directory; registered with the others.
// envNameRE is what a shell accepts as a variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var httpSettings = []setting{
	{"http.listen", "http-listen", "BATCHER_HTTP_LISTEN", `OpenAI-compatible HTTP listen address, host:port, or "off"`, func(c *Config, v string) error { c.HTTP.Listen = v; return nil }},
}

func init() {
	settings = append(settings, httpSettings...)
	extraDefaults["http.listen"] = func(c *Config) string { return c.HTTP.Listen }
}

// FilesDir is where uploaded files live: <data_dir>/files, or "" when no
// data directory is set.
func (c *Config) FilesDir() string {
	if c.Jobs.DataDir == "" {
		return ""
	}
	return c.Jobs.DataDir + string(os.PathSeparator) + "files"
}

// authenticated reports whether tokens are configured.
func (h *HTTP) authenticated() bool { return h.TokensEnv != "" || h.TokensFile != "" }

// validate checks the front door's settings; see HTTP. The front door
// shares the gRPC listener's TLS and tenants (sec): an address other than
// loopback needs TLS and authentication (the tenants, a required client
// CA, or the front door's own tokens), or security.insecure.
func (h *HTTP) validate(sec *Security, e *errs) {
	if h.Listen != HTTPOff {
		_, port, err := net.SplitHostPort(h.Listen)
		switch {
		case err != nil:
			e.add("http.listen", "must be host:port or %q, got %q", HTTPOff, h.Listen)
		case !validPort(port):
			e.add("http.listen", "port must be 0 to 65535, got %q", port)
		default:
			// The rule of every listener: loopback, or TLS and
			// authentication (the tenants, a required client CA, or the
			// front door's own tokens), or --insecure.
			if err := security.CheckBind("http.listen", h.Listen, sec.TLS.CertFile != "", h.authenticated() || sec.authOn(), sec.Insecure); err != nil {
				*e = append(*e, err)
			}
		}
	}
	if h.authenticated() && sec.TenantsFile != "" {
		e.add("http.tokens_env", "http.tokens_env and http.tokens_file cannot be used with security.tenants_file: give the front door's callers tokens in the tenants file")
	}
	if h.TokensEnv != "" && !envNameRE.MatchString(h.TokensEnv) {
		e.add("http.tokens_env", "must be an environment variable name such as BATCHER_HTTP_TOKENS, got %q", h.TokensEnv)
	}
	for _, f := range []struct {
		path string
		v    int64
	}{{"http.max_body_bytes", h.MaxBodyBytes}, {"http.max_file_bytes", h.MaxFileBytes}, {"http.max_json_depth", int64(h.MaxJSONDepth)}, {"http.max_inputs", int64(h.MaxInputs)}} {
		if f.v < 0 {
			e.add(f.path, "must not be negative, got %d", f.v)
		}
	}
	if h.MaxJSONDepth == 1 {
		e.add("http.max_json_depth", "must be at least 2, got 1")
	}
	if d := h.DefaultTimeout.D(); d < 0 || d > openaiapi.MaxTimeout {
		e.add("http.default_timeout", "must be 0 to %v, got %v", openaiapi.MaxTimeout, d)
	}
}

func validPort(p string) bool {
	_, err := strconv.ParseUint(p, 10, 16)
	return err == nil
}

// tokens reads the configured tokens: from the variable named by
// tokens_env (comma-separated) and the file named by tokens_file (one a
// line; blank lines and # comments skipped). A source configured but empty
// fails, naming it; so that a mistake cannot leave the API open.
func (h *HTTP) tokens(lookupEnv func(string) (string, bool)) ([]string, error) {
	var out []string
	if h.TokensEnv != "" {
		v, _ := lookupEnv(h.TokensEnv)
		n := len(out)
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("http.tokens_env: environment variable %s holds no token", h.TokensEnv)
		}
	}
	if h.TokensFile != "" {
		data, err := readLimited(h.TokensFile, maxTokensFile)
		if err != nil {
			return nil, fmt.Errorf("http.tokens_file: %w", err)
		}
		n := len(out)
		for _, line := range strings.Split(string(data), "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				out = append(out, t)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("http.tokens_file: %s holds no token", h.TokensFile)
		}
	}
	return out, nil
}

func readLimited(name string, limit int64) ([]byte, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, limit)
	}
	return data, nil
}

// HTTPFront is what the front door needs, resolved from the config.
type HTTPFront struct {
	Listen string
	// Authenticated: tokens are configured. Without, batcherd serves only
	// on loopback.
	Authenticated bool
	Options       []openaiapi.Option
	// FilesDir is where uploads live; "" when no data_dir is set.
	FilesDir string
}

// BuildHTTP resolves the front door's options, reading the tokens with
// lookupEnv; tp, when not nil, traces every call. It returns nil when
// http.listen is "off". Call it on a validated Config.
func (c *Config) BuildHTTP(lookupEnv func(string) (string, bool), tp trace.TracerProvider) (*HTTPFront, error) {
	h := &c.HTTP
	if h.Listen == HTTPOff {
		return nil, nil
	}
	tokens, err := h.tokens(lookupEnv)
	if err != nil {
		return nil, err
	}
	f := &HTTPFront{Listen: h.Listen, Authenticated: len(tokens) > 0, FilesDir: c.FilesDir()}
	if len(tokens) > 0 {
		f.Options = append(f.Options, openaiapi.WithTokens(tokens...))
	}
	if h.MaxBodyBytes > 0 {
		f.Options = append(f.Options, openaiapi.WithMaxBodyBytes(h.MaxBodyBytes))
	}
	if h.MaxFileBytes > 0 {
		f.Options = append(f.Options, openaiapi.WithMaxFileBytes(h.MaxFileBytes))
	}
	if h.MaxJSONDepth > 0 {
		f.Options = append(f.Options, openaiapi.WithMaxJSONDepth(h.MaxJSONDepth))
	}
	if h.MaxInputs > 0 {
		f.Options = append(f.Options, openaiapi.WithMaxInputs(h.MaxInputs))
	}
	if d := h.DefaultTimeout.D(); d > 0 {
		f.Options = append(f.Options, openaiapi.WithDefaultTimeout(d))
	}
	if tp != nil {
		f.Options = append(f.Options, openaiapi.WithTracerProvider(tp))
	}
	return f, nil
}

// checkHTTPEnv reports a tokens_env that names an empty or unset variable.
func (c *Config) checkHTTPEnv(lookupEnv func(string) (string, bool)) error {
	if c.HTTP.Listen == HTTPOff || c.HTTP.TokensEnv == "" {
		return nil
	}
	if v, _ := lookupEnv(c.HTTP.TokensEnv); strings.TrimSpace(strings.ReplaceAll(v, ",", "")) == "" {
		return errors.New("http.tokens_env: environment variable " + c.HTTP.TokensEnv + " is empty or unset")
	}
	return nil
}
