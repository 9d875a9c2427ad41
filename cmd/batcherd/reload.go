package main

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cache"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/internal/filewatch"
	"github.com/batcherhq/batcher/jobs"
)

// configReloader applies a new configuration on SIGHUP, or when the
// configuration file changes, without a restart. The configuration is
// read again from the same flags, environment and file and checked whole;
// then the backends and routes are replaced in the core at once
// (batcher.Batcher.Reconfigure):
//   - a backend whose limits alone changed (max_concurrency,
//     min_concurrency, rpm, tpm, their bursts, protected_share) keeps its
//     implementation and state, and its limits change in place;
//   - a backend whose other settings changed is built anew, as is a new
//     one; requests admitted before keep the route they were admitted
//     with, and finish on its old backend;
//   - a backend removed serves what was admitted on it, then idles until
//     the process exits, when it is closed with the others.
//
// The response cache forgets the routes a reload removed (their answers,
// budgets, counts and metrics series), and the budgets of routes that no
// longer have one of their own (cache.Cache.Retain).
//
// Tenants, tokens, their routes, priority ceilings and quotas, and the TLS
// and JWKS files reload through security.Security at the same moment. A
// configuration that fails to load, that the core refuses, or that
// changes settings other than the backends and routes (the listeners, the
// queue, the jobs store), is refused whole: the old one keeps running and
// the reason is logged.
type configReloader struct {
	args      []string
	lookupEnv func(string) (string, bool)
	buildOpts []config.BuildOption
	core      *batcher.Batcher
	jobs      *jobs.Manager // nil: jobs off
	cache     *cache.Cache  // nil: the response cache off
	log       *slog.Logger

	mu      sync.Mutex // one reload at a time; guards what follows
	running *config.Config
	impls   map[string]batcher.Backend // the backends' implementations in force
	built   []*config.Built            // every reload's backends, closed at exit
	file    filewatch.Set              // the configuration file, when watched

	stop chan struct{}
	done chan struct{}
}

func newConfigReloader(args []string, lookupEnv func(string) (string, bool), buildOpts []config.BuildOption,
	core *batcher.Batcher, jm *jobs.Manager, rc *cache.Cache, log *slog.Logger, running *config.Config, built *config.Built) *configReloader {
	r := &configReloader{
		args: args, lookupEnv: lookupEnv, buildOpts: buildOpts, core: core, jobs: jm, cache: rc, log: log,
		running: running, impls: make(map[string]batcher.Backend, len(built.Impls)),
	}
	for name, impl := range built.Impls {
		r.impls[name] = impl
	}
	return r
}

// watch polls the configuration file every interval and reloads when it
// changed (an edit in place, or a new file renamed over it as a
// Kubernetes ConfigMap is). Without a file, or with interval < 0, it does
// nothing. Stop it with Close.
func (r *configReloader) watch(interval time.Duration) {
	name := r.running.File // a reload keeps the file: Load reads the same flags
	if name == "" || interval < 0 || r.stop != nil {
		return
	}
	r.file = filewatch.New(name)
	if stamps, _, err := r.file.Changed(true); err == nil {
		r.file.Done(stamps, nil) // the file as it was loaded at startup
	}
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-tick.C:
				r.mu.Lock()
				stamps, changed, err := r.file.Changed(false)
				r.mu.Unlock()
				if err != nil || !changed {
					continue // a file being replaced may be missing for a moment
				}
				r.log.Info("the configuration file changed: reloading", "file", name)
				r.reloadStamped(stamps)
			}
		}
	}()
}

// reload is SIGHUP's: it reloads whether the file changed or not.
func (r *configReloader) reload() { r.reloadStamped(nil) }

// reloadStamped reloads; stamps, when the watcher saw the file change,
// records the outcome so that a bad file is tried once per change.
func (r *configReloader) reloadStamped(stamps []filewatch.Stamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.apply()
	if stamps != nil {
		r.file.Done(stamps, err)
	}
	if err != nil {
		r.log.Error("config reload refused; the old configuration stays in force", "err", err)
	}
}

func (r *configReloader) apply() error {
	next, err := config.Load(r.args, r.lookupEnv, io.Discard)
	if err != nil {
		return err
	}
	if diff := r.running.NeedsRestart(next); len(diff) > 0 {
		return errors.New("these settings reload only with a restart (the backends, routes, and the TLS, tenants and JWKS files reload without one): " + strings.Join(diff, ", "))
	}
	plan, err := r.running.BuildReload(next, r.impls, r.buildOpts...)
	if err != nil {
		return err
	}
	if err := r.core.Reconfigure(plan.Backends, plan.Routes); err != nil {
		_ = plan.Built.Close()
		return err
	}
	for _, name := range plan.Removed {
		delete(r.impls, name)
	}
	for name, impl := range plan.Built.Impls {
		r.impls[name] = impl
	}
	r.built = append(r.built, plan.Built)
	if r.cache != nil {
		r.cache.Retain(plan.Routes)
	}
	if r.jobs != nil {
		r.jobs.RoutesChanged()
		if err := r.jobs.SetPrices(next.Prices()); err != nil { // validated with the config
			r.log.Error("configuration reload: prices", "err", err)
		}
	}
	r.running = next
	names := make([]string, len(next.Routes))
	for i, rt := range next.Routes {
		names[i] = rt.Name
	}
	r.log.Info("configuration reloaded", "routes", names,
		"backends_kept", plan.Kept, "backends_rebuilt", plan.Rebuilt, "backends_added", plan.Added, "backends_removed", plan.Removed)
	return nil
}

// Close stops the watcher. Idempotent.
func (r *configReloader) Close() {
	if r.stop != nil {
		select {
		case <-r.stop:
		default:
			close(r.stop)
		}
		<-r.done
	}
}

// closeBackends closes the backends every reload built, once the core has
// shut down: a request admitted before a reload may use them to the end.
func (r *configReloader) closeBackends() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, b := range r.built {
		errs = append(errs, b.Close())
	}
	r.built = nil
	return errors.Join(errs...)
}
