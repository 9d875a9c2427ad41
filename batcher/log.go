package batcher

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// logInterval is how often each kind of event is logged at most, per
// backend: a storm of rate limits or fallbacks writes one line a second,
// not one per request.
const logInterval = time.Second

// WithLogger sets where the core logs what an operator needs to see of its
// upstreams: breaker transitions (WARN when opening, INFO otherwise),
// requests moved to a fallback or failed for the budget, and dispatch
// pauses for rate limits (INFO). Repeated events of one kind are logged at
// most once a second per backend. Default: none.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// backendLog is one backend's rate-limited logger. A nil *backendLog logs
// nothing.
type backendLog struct {
	l        *slog.Logger
	backend  string
	fallback rate.Sometimes
	budget   rate.Sometimes
	pause    rate.Sometimes
}

func newBackendLog(l *slog.Logger, backend string) *backendLog {
	if l == nil {
		return nil
	}
	return &backendLog{
		l: l, backend: backend,
		fallback: rate.Sometimes{Interval: logInterval},
		budget:   rate.Sometimes{Interval: logInterval},
		pause:    rate.Sometimes{Interval: logInterval},
	}
}

// callContext is a context carrying c's span, so that a log handler that
// reads trace context can tie the line to the request.
func callContext(c *Call) context.Context {
	if c != nil && c.span != nil {
		return trace.ContextWithSpan(context.Background(), c.span)
	}
	return context.Background()
}

func (g *backendLog) breaker(from, to BreakerState) {
	if g == nil {
		return
	}
	level := slog.LevelInfo
	if to == BreakerOpen {
		level = slog.LevelWarn
	}
	g.l.LogAttrs(context.Background(), level, "batcher: breaker "+to.String(),
		slog.String("backend", g.backend), slog.String("from", from.String()), slog.String("to", to.String()))
}

func (g *backendLog) fellBack(c *Call, route string, to uint8, reason error) {
	if g == nil {
		return
	}
	g.fallback.Do(func() {
		g.l.LogAttrs(callContext(c), slog.LevelInfo, "batcher: request moved to a fallback",
			slog.String("backend", g.backend), slog.String("route", route), slog.Int("target", int(to)), slog.String("reason", reason.Error()))
	})
}

func (g *backendLog) budgetFailed(c *Call, route string, err error) {
	if g == nil {
		return
	}
	g.budget.Do(func() {
		g.l.LogAttrs(callContext(c), slog.LevelWarn, "batcher: request failed: the budget cannot meet its deadline",
			slog.String("backend", g.backend), slog.String("route", route), slog.String("err", err.Error()))
	})
}

func (g *backendLog) paused(d time.Duration, why string) {
	if g == nil {
		return
	}
	g.pause.Do(func() {
		g.l.LogAttrs(context.Background(), slog.LevelInfo, "batcher: dispatch paused for a rate limit",
			slog.String("backend", g.backend), slog.Duration("for", d), slog.String("why", why))
	})
}

// limitsChanged logs a backend's limits changed in place (Reconfigure).
func (g *backendLog) limitsChanged(from, to BackendConfig) {
	if g == nil {
		return
	}
	g.l.Info("backend limits changed", "backend", g.backend,
		"max_concurrency", to.MaxConcurrency, "was_max_concurrency", from.MaxConcurrency,
		"rpm", to.RPM, "was_rpm", from.RPM, "tpm", to.TPM, "was_tpm", from.TPM,
		"protected_share", to.ProtectedShare)
}
