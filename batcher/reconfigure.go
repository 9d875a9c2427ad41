package batcher

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"
)

// backendSet is the backends in force: New's, then each Reconfigure's.
// It is never changed once stored.
type backendSet struct {
	byName map[string]*backendState
	list   []*backendState // in configuration order
}

// limitsChange is a backend kept across a Reconfigure whose limits change
// in place.
type limitsChange struct {
	be *backendState
	bc BackendConfig
}

// planBackends resolves cfgs into the next backend set. A backend whose
// implementation and settings other than its limits are those of the one
// in force keeps its state (its budgets, breaker, workers and stats), and
// its limits change in place (returned in changes); any other is a new
// state. Nothing is changed yet: commitBackends does that.
func (b *Batcher) planBackends(cfgs []BackendConfig) (*backendSet, []limitsChange, []error) {
	cur := b.backends.Load() // nil in New
	set := &backendSet{byName: make(map[string]*backendState, len(cfgs))}
	var changes []limitsChange
	var errs []error
	for _, bc := range cfgs {
		bc, err := resolveBackend(bc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := set.byName[bc.Name]; dup {
			errs = append(errs, fmt.Errorf("backend %q: defined twice", bc.Name))
			continue
		}
		var be *backendState
		if cur != nil {
			if old := cur.byName[bc.Name]; old != nil && sameButLimits(old.cfg, bc) {
				be = old
				changes = append(changes, limitsChange{be: old, bc: bc})
			} else if old != nil {
				be = newBackendState(bc, b.cfg.agingStep, b.cfg.logger)
				be.stats = old.stats // its counters go on under the same name
			}
		}
		if be == nil {
			be = newBackendState(bc, b.cfg.agingStep, b.cfg.logger)
		}
		set.byName[bc.Name] = be
		set.list = append(set.list, be)
	}
	if len(errs) > 0 {
		return set, nil, errs
	}
	return set, changes, nil
}

// commitBackends puts set in force: the limits change in place, new
// states join the fleet. Under routesMu, but in New.
func (b *Batcher) commitBackends(set *backendSet, changes []limitsChange) {
	for _, c := range changes {
		c.be.setLimits(b, c.bc)
	}
	known := make(map[*backendState]bool, len(b.allBackends))
	for _, be := range b.allBackends {
		known[be] = true
	}
	for _, be := range set.list {
		if known[be] {
			continue
		}
		be.b = b
		if b.cfg.coordinator != nil {
			be.shared = b.cfg.coordinator.Budget(be.name, be)
		}
		b.allBackends = append(b.allBackends, be)
	}
	b.backends.Store(set)
}

// Reconfigure replaces the backends and the routes at once, while the
// Batcher runs: batcherd's reload. backends and routes are checked whole,
// as New checks them; a bad set (an error naming the backend or route and
// the field, joined) is refused and the old configuration stays.
//
// A backend whose Backend implementation and settings other than its
// limits are those in force keeps its state, and its limits change in
// place: MaxConcurrency, MinConcurrency, RPM, TPM, their bursts and the
// protected share. The adaptive limits restart from the new figures;
// waiting lanes are granted at once what a raised limit allows. Any other
// change to a backend (its implementation, retry policy, breaker, attempt
// timeout) makes a new state for the new routes, with fresh budgets;
// requests admitted before keep their routes, which point at the old
// state, and finish on it. An old state's dispatch workers stay until
// Shutdown, and a Backend it used must not be closed before Shutdown
// returns. Routes behave as SetRoutes says. After Shutdown began it
// returns ErrClosed.
func (b *Batcher) Reconfigure(backends []BackendConfig, routes []Route) error {
	b.routesMu.Lock()
	defer b.routesMu.Unlock()
	if b.closing.Load() {
		return ErrClosed
	}
	set, changes, errs := b.planBackends(backends)
	if len(errs) == 0 {
		var next map[string]*routeConfig
		next, errs = b.resolveRoutes(set, routes)
		if len(errs) == 0 {
			b.commitBackends(set, changes)
			if b.metrics != nil {
				b.metrics.addRoutes(next)
			}
			b.routes.Store(&next)
			return nil
		}
	}
	return errors.Join(errs...)
}

// sameButLimits reports whether a and b differ at most in the limits that
// change in place.
func sameButLimits(a, b BackendConfig) bool {
	a.MaxConcurrency, a.MinConcurrency = b.MaxConcurrency, b.MinConcurrency
	a.RPM, a.TPM, a.RPMBurst, a.TPMBurst = b.RPM, b.TPM, b.RPMBurst, b.TPMBurst
	a.rpmBurstSet, a.tpmBurstSet = b.rpmBurstSet, b.tpmBurstSet
	a.ProtectedShare, a.StrictProtectedShare = b.ProtectedShare, b.StrictProtectedShare
	return sameImpl(a.Backend, b.Backend) && a.AttemptTimeout == b.AttemptTimeout &&
		a.StreamIdleTimeout == b.StreamIdleTimeout &&
		a.Retry == b.Retry && a.Breaker == b.Breaker
}

// sameImpl reports whether x and y are the same Backend value; a value
// whose type cannot be compared is never the same.
func sameImpl(x, y Backend) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return x == y
}

// setLimits changes the backend's limits to bc's in place (Reconfigure,
// under routesMu). A raised MaxConcurrency starts more workers before the
// owner applies the new limits, so that every permit out has a worker; it
// returns once the owner has applied them.
func (s *backendState) setLimits(b *Batcher, bc BackendConfig) {
	old := s.cfg
	s.cfg.MaxConcurrency, s.cfg.MinConcurrency = bc.MaxConcurrency, bc.MinConcurrency
	s.cfg.ProtectedShare, s.cfg.StrictProtectedShare = bc.ProtectedShare, bc.StrictProtectedShare
	s.cfg.RPM, s.cfg.TPM, s.cfg.RPMBurst, s.cfg.TPMBurst = bc.RPM, bc.TPM, bc.RPMBurst, bc.TPMBurst
	s.cfg.rpmBurstSet, s.cfg.tpmBurstSet = bc.rpmBurstSet, bc.tpmBurstSet
	cfg := s.cfg
	s.configured.Store(&cfg)
	s.inMu.Lock()
	s.wantWorkers = bc.MaxConcurrency
	grow := 0
	if s.owner == ownerRunning && s.workersN < bc.MaxConcurrency {
		grow = bc.MaxConcurrency - s.workersN
		s.workersN = bc.MaxConcurrency
		b.workers.Add(grow)
	}
	s.inMu.Unlock()
	for range grow {
		go s.worker(&b.workers)
	}
	done := make(chan struct{})
	s.send(bmsg{kind: bmLimits, bc: &bc, done: done})
	<-done
	s.log.limitsChanged(old, bc)
}

// reconfigure sets a configured rate and burst in place (perMinute 0: no
// configured rate; one is learned from the upstream's headers again). What
// the bucket holds now is kept, within the new burst.
func (b *bucket) reconfigure(now time.Time, perMinute, burst int, burstSet bool) {
	if b.perMinute == perMinute && b.baseBurst == burst && b.learnBurst == !burstSet {
		return
	}
	switch {
	case perMinute == 0 && b.perMinute > 0:
		// The configured rate is gone: learn the upstream's.
		b.lim, b.credit = nil, 0
	case perMinute > 0 && b.lim == nil:
		b.lim = rate.NewLimiter(rate.Limit(float64(perMinute)/60*b.share), shareOf(burst, b.share))
	case perMinute > 0:
		b.lim.SetLimitAt(now, rate.Limit(float64(perMinute)/60*b.share))
		b.lim.SetBurstAt(now, shareOf(burst, b.share))
		b.tokensAt(now) // caps the credit
	case b.lim != nil && burstSet:
		// A learned rate with a configured burst.
		b.lim.SetBurstAt(now, shareOf(burst, b.share))
		b.tokensAt(now)
	}
	b.perMinute, b.learnBurst = perMinute, !burstSet
	if perMinute > 0 || burstSet {
		b.baseBurst = burst
	}
}
