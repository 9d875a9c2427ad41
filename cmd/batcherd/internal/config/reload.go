package config

import (
	"reflect"
	"strings"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// CoreRoutes returns the core's routes of a validated configuration, for
// batcher.Batcher.SetRoutes.
func (c *Config) CoreRoutes() []batcher.Route {
	out := make([]batcher.Route, len(c.Routes))
	for i := range c.Routes {
		out[i] = c.Routes[i].coreRoute()
	}
	return out
}

// NeedsRestart returns the top-level settings (their YAML names) in which
// next differs from c other than those a reload applies: the routes and
// the backends (BuildReload). The files the security settings name
// (certificates, tenants, JWKS) reload on their own; a change to the
// settings themselves, as to the listeners or the queue, needs a restart.
func (c *Config) NeedsRestart(next *Config) []string {
	var out []string
	a, b := reflect.ValueOf(c).Elem(), reflect.ValueOf(next).Elem()
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "routes" || name == "backends" || name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}

// Reload is what a reload puts in force: batcher.Batcher.Reconfigure's
// backends and routes, the backends built for it, and what was kept.
type Reload struct {
	Backends []batcher.BackendConfig
	Routes   []batcher.Route
	// Built holds the implementations built for this reload (its Impls,
	// Sims and OpenAI hold only those): close it if the core refuses
	// them, or once the core has shut down.
	Built *Built
	// Kept, Rebuilt and Added name the backends whose implementation was
	// kept (their limits may change in place), built anew for changed
	// settings, and new; Removed those gone.
	Kept, Rebuilt, Added, Removed []string
}

// BuildReload plans the reload from the running configuration c to next,
// which Load has validated: a backend whose settings but its limits
// (max_concurrency, min_concurrency, rpm, tpm, their bursts,
// protected_share) are unchanged keeps its implementation, impls[name];
// any other is built anew, as Build builds it, with opts.
func (c *Config) BuildReload(next *Config, impls map[string]batcher.Backend, opts ...BuildOption) (*Reload, error) {
	var bc buildConfig
	for _, o := range opts {
		o(&bc)
	}
	if err := next.Validate(); err != nil {
		return nil, err
	}
	tp := bc.tp
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	running := make(map[string]*Backend, len(c.Backends))
	for i := range c.Backends {
		running[c.Backends[i].Name] = &c.Backends[i]
	}
	r := &Reload{Built: &Built{Sims: map[string]*sim.Provider{}, OpenAI: map[string]*openai.Backend{}, Impls: map[string]batcher.Backend{}}}
	for i := range next.Backends {
		be := &next.Backends[i]
		old, impl := running[be.Name], impls[be.Name]
		delete(running, be.Name)
		switch {
		case old != nil && impl != nil && sameImplSettings(*old, *be):
			r.Kept = append(r.Kept, be.Name)
		default:
			var err error
			if impl, err = r.Built.buildBackend(i, be, tp, bc.lookupEnv); err != nil {
				_ = r.Built.Close()
				return nil, err
			}
			if old != nil {
				r.Rebuilt = append(r.Rebuilt, be.Name)
			} else {
				r.Added = append(r.Added, be.Name)
			}
		}
		r.Backends = append(r.Backends, be.coreConfig(impl))
	}
	for i := range c.Backends {
		if running[c.Backends[i].Name] != nil {
			r.Removed = append(r.Removed, c.Backends[i].Name)
		}
	}
	r.Routes = next.CoreRoutes()
	return r, nil
}

// sameImplSettings reports whether a and b differ at most in the limits
// the core changes in place.
func sameImplSettings(a, b Backend) bool {
	for _, be := range []*Backend{&a, &b} {
		be.MaxConcurrency, be.MinConcurrency, be.RPM, be.TPM, be.RPMBurst, be.TPMBurst, be.ProtectedShare = 0, 0, 0, 0, 0, 0, 0
	}
	return reflect.DeepEqual(a, b)
}
