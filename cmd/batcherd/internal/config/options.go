package config

import (
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/server"
)

// Built is what a validated Config turns into: the core's options, with
// the backends it built, and the server's options. Close it once the core
// has shut down.
type Built struct {
	Core   []batcher.Option
	Server []server.Option
	// Sims holds the simulated providers by backend name, for their Stats.
	Sims map[string]*sim.Provider
	// OpenAI holds the openai backends by name, for their Stats.
	OpenAI map[string]*openai.Backend
	// Anthropic holds the anthropic backends by name, for their batch API.
	Anthropic map[string]*anthropic.Backend
	// Impls holds every backend's implementation by name, for a reload
	// that keeps it (BuildReload).
	Impls map[string]batcher.Backend

	closers []namedCloser
}

type namedCloser struct {
	name string
	c    interface{ Close() error }
}

// Close closes every backend that has a Close method (an openai backend's
// idle connections), after the core's drain: a backend may not be used
// once closed. It returns their errors, each naming its backend.
func (b *Built) Close() error {
	var errs []error
	for _, nc := range b.closers {
		if err := nc.c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("backend %s: close: %w", nc.name, err))
		}
	}
	b.closers = nil
	return errors.Join(errs...)
}

// BuildOption configures Build.
type BuildOption func(*buildConfig)

type buildConfig struct {
	tp        trace.TracerProvider
	lookupEnv func(string) (string, bool)
}

// WithLookupEnv makes openai backends read their API keys with lookupEnv,
// the way Load read the rest of the environment. Default os.LookupEnv.
func WithLookupEnv(lookupEnv func(string) (string, bool)) BuildOption {
	return func(c *buildConfig) { c.lookupEnv = lookupEnv }
}

// WithTracerProvider makes the core, the server and every backend that
// makes spans (openai: one per upstream HTTP call, a child of the batch's
// span) record them with tp. Default: none; no spans at all, whatever the
// global provider.
func WithTracerProvider(tp trace.TracerProvider) BuildOption {
	return func(c *buildConfig) { c.tp = tp }
}

// Build validates c and turns it into options for batcher.New and
// server.New, building the backends. It adds no logger: that is the
// caller's. An openai backend reads its API key from the environment
// variable named by api_key_env now; an error then names the backend.
func (c *Config) Build(opts ...BuildOption) (*Built, error) {
	var bc buildConfig
	for _, o := range opts {
		o(&bc)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := &Built{
		Core:   c.coreOptions(),
		Server: c.serverOptions(),
		Sims:   map[string]*sim.Provider{},
		OpenAI: map[string]*openai.Backend{},
		Impls:  map[string]batcher.Backend{},

		Anthropic: map[string]*anthropic.Backend{},
	}
	backendTP := bc.tp
	if bc.tp != nil {
		b.Core = append(b.Core, batcher.WithTracerProvider(bc.tp))
		b.Server = append(b.Server, server.WithTracerProvider(bc.tp))
	} else {
		backendTP = noop.NewTracerProvider() // not the global one
	}
	for i := range c.Backends {
		be := &c.Backends[i]
		impl, err := b.buildBackend(i, be, backendTP, bc.lookupEnv)
		if err != nil {
			_ = b.Close()
			return nil, err
		}
		b.Core = append(b.Core, batcher.WithBackend(be.coreConfig(impl)))
	}
	for i := range c.Routes {
		b.Core = append(b.Core, batcher.WithRoute(c.Routes[i].coreRoute()))
	}
	return b, nil
}

// buildBackend builds the implementation of be, c.Backends[i], and keeps
// it in b (Impls, Sims or OpenAI, and what to close).
func (b *Built) buildBackend(i int, be *Backend, tp trace.TracerProvider, lookupEnv func(string) (string, bool)) (batcher.Backend, error) {
	var impl batcher.Backend
	switch be.Type {
	case TypeSim:
		p, err := sim.New(*be.simConfig())
		if err != nil {
			return nil, fmt.Errorf("backends[%d].sim: %w", i, err)
		}
		b.Sims[be.Name] = p
		impl = p
	case TypeOpenAI:
		p, err := newOpenAI(be.OpenAI, tp, lookupEnv)
		if err != nil {
			return nil, prefixErrs(fmt.Sprintf("backends[%d] (%s): ", i, be.Name), err)
		}
		b.OpenAI[be.Name] = p
		b.closers = append(b.closers, namedCloser{be.Name, p})
		impl = p
	case TypeAnthropic:
		p, err := newAnthropic(be.Anthropic, tp, lookupEnv)
		if err != nil {
			return nil, prefixErrs(fmt.Sprintf("backends[%d] (%s): ", i, be.Name), err)
		}
		if b.Anthropic == nil {
			b.Anthropic = map[string]*anthropic.Backend{}
		}
		b.Anthropic[be.Name] = p
		b.closers = append(b.closers, namedCloser{be.Name, p})
		impl = p
	default:
		return nil, fmt.Errorf("backends[%d].type: unknown type %q", i, be.Type)
	}
	b.Impls[be.Name] = impl
	return impl, nil
}

func newOpenAI(o *OpenAI, tp trace.TracerProvider, lookupEnv func(string) (string, bool)) (*openai.Backend, error) {
	cfg, err := o.openaiConfig(tp)
	if err != nil {
		return nil, err
	}
	cfg.LookupEnv = lookupEnv
	return openai.New(cfg)
}

// prefixErrs puts prefix before each of err's joined errors.
func prefixErrs(prefix string, err error) error {
	es := slices.Clone(unjoin(err))
	for i, e := range es {
		es[i] = fmt.Errorf("%s%w", prefix, e)
	}
	return errors.Join(es...)
}
