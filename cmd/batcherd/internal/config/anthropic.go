package config

import (
	"errors"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/trace"

	"github.com/batcherhq/batcher/backend/anthropic"
)

// Anthropic configures a backend of type anthropic (package
// backend/anthropic): Anthropic's Messages API. Each field maps onto the
// anthropic.Config field of the same name; 0 or empty takes the
// package's default. An anthropic backend serves chat routes only.
type Anthropic struct {
	// BaseURL is the part before /v1/messages. Default
	// https://api.anthropic.com.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the API key
	// (ANTHROPIC_API_KEY, say), read at start and sent as x-api-key. The
	// key never sits in the file. Empty: no key (llmsim, or a gateway that
	// adds it).
	APIKeyEnv string `yaml:"api_key_env"`
	// Version is the anthropic-version header. Default 2023-06-01.
	Version string `yaml:"version"`
	// Beta, when set, goes out as the anthropic-beta header.
	Beta string `yaml:"beta"`
	// Headers are sent on every call; they may not set x-api-key,
	// anthropic-version or anthropic-beta.
	Headers map[string]string `yaml:"headers"`
	// MaxTokens is the max_tokens of a call that carries none. Requests
	// through a route always carry one (theirs, or the route's
	// default_max_tokens, which is what Anthropic gets); default 1024.
	MaxTokens int32 `yaml:"max_tokens"`
	// Timeout bounds one upstream HTTP call (a streamed one: the wait for
	// its headers). Default 10m.
	Timeout Duration `yaml:"timeout"`
	// MaxResponseBytes bounds a response body. Default 32 MiB.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// MaxFanOut bounds the concurrent upstream calls of one batch.
	// Default 16.
	MaxFanOut int `yaml:"max_fan_out"`
	// MaxIdleConns bounds the idle keep-alive connections. Default 64.
	MaxIdleConns int `yaml:"max_idle_conns"`
	// TLS, for an https base_url, trusts a private CA or presents a client
	// certificate.
	TLS *TLS `yaml:"tls"`
}

// validate has anthropic.Validate check a, adding each error under its
// YAML path (path is "backends[i].anthropic"), and checks the TLS
// section. Whether api_key_env's variable is set is checkEnv's.
func (a *Anthropic) validate(path string, e *errs) {
	for _, err := range unjoin(anthropic.Validate(a.config(nil))) {
		var fe *anthropic.FieldError
		if !errors.As(err, &fe) {
			e.add(path, "%v", err)
			continue
		}
		*e = append(*e, fmt.Errorf("%s.%s: %s", path, yamlPath(fe.Field), fe.Reason))
	}
	if t := a.TLS; t != nil {
		if u, err := url.Parse(a.BaseURL); err == nil && u.Scheme != "https" && u.Scheme != "" {
			e.add(path+".tls", "only for an https base_url, got scheme %q", u.Scheme)
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			e.add(path+".tls", "cert_file and key_file go together: both or neither")
		}
	}
}

// config is a as anthropic.Config, without its TLS files.
func (a *Anthropic) config(tp trace.TracerProvider) anthropic.Config {
	return anthropic.Config{
		BaseURL:          a.BaseURL,
		APIKeyEnv:        a.APIKeyEnv,
		Version:          a.Version,
		Beta:             a.Beta,
		Headers:          a.Headers,
		MaxTokens:        a.MaxTokens,
		Timeout:          a.Timeout.D(),
		MaxResponseBytes: a.MaxResponseBytes,
		MaxFanOut:        a.MaxFanOut,
		MaxIdleConns:     a.MaxIdleConns,
		TracerProvider:   tp,
	}
}

func newAnthropic(a *Anthropic, tp trace.TracerProvider, lookupEnv func(string) (string, bool)) (*anthropic.Backend, error) {
	if a == nil {
		a = &Anthropic{}
	}
	c := a.config(tp)
	if a.TLS != nil {
		tc, err := a.TLS.config()
		if err != nil {
			return nil, err
		}
		c.TLS = tc
	}
	c.LookupEnv = lookupEnv
	return anthropic.New(c)
}
