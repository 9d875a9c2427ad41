package openai

import (
	"context"
	"sync"
	"time"
)

// packState tracks, per route, whether its packs keep failing. A route
// whose Pack.PauseAfter packs in a row fail as a whole (whatever the
// reason; their requests are re-sent singly) stops packing for
// Pack.PauseFor: its batches go out as single calls, which an upstream that
// chokes on packs still answers, and UpstreamCalls counts them so.
type packState struct {
	mu     sync.Mutex
	routes map[string]*routePack // by route; only routes that packed
}

type routePack struct {
	failures int       // packs failed in a row
	until    time.Time // packing paused until then; zero: not paused
}

// packing reports whether a chat batch of route is packed now. A pause
// that has run out ends here, and that is logged.
func (b *Backend) packing(ctx context.Context, route string) bool {
	if !b.cfg.packs(route) {
		return false
	}
	b.ps.mu.Lock()
	rp := b.ps.routes[route]
	if rp == nil || rp.until.IsZero() {
		b.ps.mu.Unlock()
		return true
	}
	if b.now().Before(rp.until) {
		b.ps.mu.Unlock()
		return false
	}
	rp.until, rp.failures = time.Time{}, 0
	b.ps.mu.Unlock()
	b.st.pausedRoutes.Add(-1)
	b.log.InfoContext(ctx, "openai: route packs again after its pause", "route", route, "pause", b.cfg.Pack.PauseFor.String())
	return true
}

// packPaused reports whether route's packing is paused now.
func (b *Backend) packPaused(route string) bool {
	b.ps.mu.Lock()
	defer b.ps.mu.Unlock()
	rp := b.ps.routes[route]
	return rp != nil && !rp.until.IsZero() && b.now().Before(rp.until)
}

// packFailed books a pack of n requests of route that failed as a whole
// with err, and pauses the route's packing when enough failed in a row.
func (b *Backend) packFailed(ctx context.Context, route string, n int, err error) {
	b.st.packFailed.Add(1)
	if b.cfg.Pack.PauseAfter < 0 {
		return
	}
	b.ps.mu.Lock()
	rp := b.ps.routes[route]
	if rp == nil {
		rp = &routePack{}
		b.ps.routes[route] = rp
	}
	if !rp.until.IsZero() { // paused already: a pack that was in flight
		b.ps.mu.Unlock()
		return
	}
	rp.failures++
	if rp.failures < b.cfg.Pack.PauseAfter {
		b.ps.mu.Unlock()
		return
	}
	rp.until, rp.failures = b.now().Add(b.cfg.Pack.PauseFor), 0
	until := rp.until
	b.ps.mu.Unlock()
	b.st.packPauses.Add(1)
	b.st.pausedRoutes.Add(1)
	b.log.WarnContext(ctx, "openai: route stops packing: its packs keep failing, its requests go as single calls",
		"route", route, "failed_packs_in_a_row", b.cfg.Pack.PauseAfter, "last_pack_requests", n,
		"pause", b.cfg.Pack.PauseFor.String(), "until", until, "err", err.Error())
}

// packAnswered books a pack of route that was answered: the run of
// failures ends.
func (b *Backend) packAnswered(route string) {
	b.ps.mu.Lock()
	if rp := b.ps.routes[route]; rp != nil && rp.until.IsZero() {
		rp.failures = 0
	}
	b.ps.mu.Unlock()
}
