package main

import (
	"io"
	"log/slog"
	"sync"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/jobs"
)

// configReloader applies a new configuration on SIGHUP, as far as it can
// without a restart. The configuration is read again from the same flags,
// environment and file, and checked whole (as at startup, backends built
// and closed again); then the routes are replaced in the core
// (batcher.Batcher.SetRoutes), where requests already admitted keep the
// route they were admitted with and finish on its old settings. Tenants,
// tokens, their routes, priority ceilings and quotas, and the TLS and JWKS
// files reload through security.Security at the same moment. A new
// configuration that fails to load, or that changes settings other than
// the routes (the backends, listeners, limits), is refused whole: the old
// one keeps running and the reason is logged.
type configReloader struct {
	args      []string
	lookupEnv func(string) (string, bool)
	core      *batcher.Batcher
	jobs      *jobs.Manager // nil: jobs off
	log       *slog.Logger

	mu      sync.Mutex // one reload at a time
	running *config.Config
}

func (r *configReloader) reload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := config.Load(r.args, r.lookupEnv, io.Discard)
	if err == nil {
		var built *config.Built
		// Build checks what Load cannot (backends' keys, for one); the
		// backends it makes are not used.
		if built, err = next.Build(config.WithLookupEnv(r.lookupEnv)); err == nil {
			_ = built.Close()
		}
	}
	if err != nil {
		r.log.Error("config reload refused; the old configuration stays in force", "err", err)
		return
	}
	if diff := r.running.NeedsRestart(next); len(diff) > 0 {
		r.log.Error("config reload refused; the old configuration stays in force",
			"err", "only routes reload without a restart (and the TLS, tenants and JWKS files)", "changed", diff)
		return
	}
	if err := r.core.SetRoutes(next.CoreRoutes()...); err != nil {
		r.log.Error("config reload refused; the old configuration stays in force", "err", err)
		return
	}
	if r.jobs != nil {
		r.jobs.RoutesChanged()
	}
	r.running = next
	names := make([]string, len(next.Routes))
	for i, rt := range next.Routes {
		names[i] = rt.Name
	}
	r.log.Info("reloaded routes", "routes", names)
}
