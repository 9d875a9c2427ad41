package batcher

import (
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker defaults, in the spirit of LiteLLM's cooldowns. Ten failures in a
// row, not five: a provider failing 20% of calls at random (flaky, but
// healthy enough to retry against) fails five in a row somewhere in about a
// quarter of 1,300-call runs, ten in a row in one of ten thousand.
const (
	DefaultBreakerConsecutive = 10
	DefaultBreakerRatio       = 0.5
	DefaultBreakerWindow      = 30 * time.Second
	DefaultBreakerMinCalls    = 10
	DefaultBreakerCooldown    = 5 * time.Second
	DefaultBreakerProbes      = 1
)

// BreakerConfig configures a backend's circuit breaker. It opens after
// Consecutive failed calls in a row, or when at least MinCalls calls over the
// rolling Window failed at Ratio or more. While open, the backend takes no
// calls: its routes fall back, or fail fast with ErrNoBackend. After Cooldown
// it lets Probes calls through; their success closes it, a failure opens it
// again. Rate limits and invalid requests do not count as failures: they say
// nothing about the backend's health.
type BreakerConfig struct {
	Consecutive int           // default DefaultBreakerConsecutive; negative: off
	Ratio       float64       // default DefaultBreakerRatio; 0 to 1
	Window      time.Duration // default DefaultBreakerWindow
	MinCalls    int           // default DefaultBreakerMinCalls
	Cooldown    time.Duration // default DefaultBreakerCooldown
	Probes      int           // default DefaultBreakerProbes
}

func (c BreakerConfig) resolve() (BreakerConfig, error) {
	if c.Consecutive == 0 {
		c.Consecutive = DefaultBreakerConsecutive
	}
	if c.Ratio == 0 {
		c.Ratio = DefaultBreakerRatio
	}
	if c.Window == 0 {
		c.Window = DefaultBreakerWindow
	}
	if c.MinCalls == 0 {
		c.MinCalls = DefaultBreakerMinCalls
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultBreakerCooldown
	}
	if c.Probes == 0 {
		c.Probes = DefaultBreakerProbes
	}
	switch {
	case c.Ratio < 0 || c.Ratio > 1 || c.Ratio != c.Ratio:
		return c, badSetting("ratio", "must be 0 to 1, got %v", c.Ratio)
	case c.Window < time.Second:
		return c, badSetting("window", "must be at least 1s, got %v", c.Window)
	case c.MinCalls < 1:
		return c, badSetting("min_calls", "must be at least 1, got %d", c.MinCalls)
	case c.Cooldown < 0:
		return c, badSetting("cooldown", "must be positive, got %v", c.Cooldown)
	case c.Probes < 1:
		return c, badSetting("probes", "must be at least 1, got %d", c.Probes)
	}
	return c, nil
}

// BreakerState is a circuit breaker's state.
type BreakerState uint8

// The breaker states.
const (
	BreakerClosed BreakerState = iota
	BreakerHalfOpen
	BreakerOpen
)

func (s BreakerState) String() string {
	return [...]string{"closed", "half_open", "open"}[s]
}

type breaker = gobreaker.TwoStepCircuitBreaker[struct{}]

func newBreaker(name string, c BreakerConfig, onChange func(from, to BreakerState)) *breaker {
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         name,
		MaxRequests:  uint32(c.Probes),
		Interval:     c.Window,
		BucketPeriod: c.Window / 10,
		Timeout:      c.Cooldown,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			if c.Consecutive > 0 && n.ConsecutiveFailures >= uint32(c.Consecutive) {
				return true
			}
			return n.Requests >= uint32(c.MinCalls) && float64(n.TotalFailures) >= c.Ratio*float64(n.Requests)
		},
		IsExcluded: func(err error) bool {
			if err == nil {
				return false
			}
			if errors.Is(err, errUnused) {
				return true
			}
			cl := classify(err)
			return cl == ClassRateLimit || cl == ClassInvalidRequest
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			onChange(breakerState(from), breakerState(to))
		},
	})
}

func breakerState(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	}
	return BreakerClosed
}
