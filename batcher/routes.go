package batcher

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// resolveRoutes checks and resolves routes against the backends in set.
func (b *Batcher) resolveRoutes(set *backendSet, rs []Route) (map[string]*routeConfig, []error) {
	var errs []error
	routes := make(map[string]*routeConfig, len(rs))
	for _, r := range rs {
		rc, err := resolveRoute(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := routes[rc.Name]; dup {
			errs = append(errs, fmt.Errorf("route %q: defined twice", rc.Name))
			continue
		}
		if err := set.resolveTargets(&rc); err != nil {
			errs = append(errs, err)
			continue
		}
		routes[rc.Name] = &rc
	}
	if len(errs) == 0 && len(routes) == 0 {
		errs = append(errs, errors.New("routes: at least one route is needed"))
	}
	return routes, errs
}

// SetRoutes replaces the routes while the Batcher runs: a route added is
// served at once, a route removed refuses new requests as an unknown
// model, and a route changed serves new requests with its new settings in
// lanes of its own. Requests admitted before keep the route they were
// admitted with, whatever happens to it, and finish on its old settings.
// The routes may use only the backends in force (New's, or
// Reconfigure's). A bad set (an error
// naming the route and field, joined) is refused whole and the old routes
// stay. After Shutdown began it returns ErrClosed.
func (b *Batcher) SetRoutes(routes ...Route) error {
	b.routesMu.Lock()
	defer b.routesMu.Unlock()
	if b.closing.Load() {
		return ErrClosed
	}
	next, errs := b.resolveRoutes(b.backends.Load(), routes)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if b.metrics != nil {
		b.metrics.addRoutes(next) // before the routes can be used
	}
	b.routes.Store(&next)
	return nil
}

// resolveTargets points a route at its backend and fallbacks.
func (set *backendSet) resolveTargets(rc *routeConfig) error {
	all := append([]Target{{Backend: rc.Backend, Model: rc.Model}}, rc.Fallbacks...)
	// resolveRoute held the fallbacks to MaxFallbacks: a target's index fits a byte.
	for i, t := range all {
		be := set.byName[t.Backend]
		if be == nil {
			path := "backend"
			if i > 0 {
				path = fmt.Sprintf("fallbacks[%d]", i-1)
			}
			return &SettingError{Owner: fmt.Sprintf("route %q", rc.Name), Path: path, Reason: fmt.Sprintf("no backend named %q", t.Backend)}
		}
		model := t.Model
		if model == "" {
			model = rc.Name
		}
		shared := AllParams
		if ps, ok := be.cfg.Backend.(ParamSharer); ok {
			shared = ps.SharedParams(rc.Name, model, rc.Op) & AllParams
		}
		f := FeatureSeed // a plain parameter: honoured unless declared otherwise
		if fd, ok := be.cfg.Backend.(FeatureDeclarer); ok {
			f = fd.Features(rc.Name, model, rc.Op) & AllFeatures
		}
		if i == 0 {
			rc.features = f
		} else {
			rc.features &= f
		}
		rc.targets = append(rc.targets, target{be: be, model: model, shared: shared, features: f})
	}
	rc.hot = make([]atomic.Pointer[lane], len(rc.targets))
	return nil
}

// RouteInfo describes a configured route.
type RouteInfo struct {
	Name    string
	Op      Operation
	Backend string
	// DefaultMaxTokens is what a request that leaves max_tokens unset gets.
	DefaultMaxTokens int32
	// MaxTokensLimit and MaxInputBytes are the route's limits on a
	// request's max_tokens and input (Route's fields of the same names),
	// which Validate checks a request against.
	MaxTokensLimit int32
	MaxInputBytes  int
	// Features are what every target of the route honours beyond plain
	// text (FeatureDeclarer), which Validate checks a request against.
	Features Features
	// Targets are the route's backend and then its fallbacks, each with
	// what it honours: Validate's refusal of a field the route's own
	// backend takes names the fallback that cannot.
	Targets []TargetInfo
	// Window is how long a NORMAL request waits for its batch to fill
	// (BatchConfig.Window, or its Delays' NORMAL delay).
	Window time.Duration
}

// TargetInfo is one target of a route: its backend and what it honours.
type TargetInfo struct {
	Backend  string
	Features Features
}

// Routes lists the configured routes.
func (b *Batcher) Routes() []RouteInfo {
	routes := *b.routes.Load()
	out := make([]RouteInfo, 0, len(routes))
	for _, rc := range routes {
		out = append(out, RouteInfo{Name: rc.Name, Op: rc.Op, Backend: rc.Backend, DefaultMaxTokens: rc.DefaultMaxTokens,
			MaxTokensLimit: rc.MaxTokensLimit, MaxInputBytes: rc.MaxInputBytes, Features: rc.features, Targets: rc.targetInfo(),
			Window: rc.delays[PriorityNormal]})
	}
	return out
}

// targetInfo describes rc's targets, in order.
func (rc *routeConfig) targetInfo() []TargetInfo {
	out := make([]TargetInfo, len(rc.targets))
	for i, t := range rc.targets {
		out[i] = TargetInfo{Backend: t.be.name, Features: t.features}
	}
	return out
}
