package batcher

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Results and Submit wrap them with %w; test with errors.Is.
var (
	// ErrQueueFull: the bounded queue is full; retry after a moment.
	ErrQueueFull = errors.New("batcher: queue full")
	// ErrClosed: the batcher no longer admits requests (shutdown).
	ErrClosed = errors.New("batcher: shutting down")
	// ErrShutdown: the request was pending when the drain deadline passed.
	ErrShutdown = errors.New("batcher: shut down before the request completed")
	// ErrInvalid: the request is malformed. The error is a *ValidationError.
	ErrInvalid = errors.New("batcher: invalid request")
	// ErrDeadline: the request's deadline passed.
	ErrDeadline = errors.New("batcher: request deadline exceeded")
	// ErrCanceled: the caller cancelled the request.
	ErrCanceled = errors.New("batcher: request cancelled")
	// ErrNoBackend: no healthy backend can serve the request's route.
	ErrNoBackend = errors.New("batcher: no healthy backend")
	// ErrBudgetExhausted: the backend's rate budget cannot serve the request
	// before its deadline, and no fallback could. The message names the
	// budget.
	ErrBudgetExhausted = errors.New("batcher: budget exhausted")
	// ErrTooManyLanes: the request needs a new lane (its route with its
	// batch-relevant parameters) and the lane cap is reached. The message
	// names the limit.
	ErrTooManyLanes = errors.New("batcher: too many lanes")
)

// ValidationError names the field of a request that is wrong and why.
type ValidationError struct {
	Field  string // for example "params.temperature"
	Reason string // for example "must be between 0 and 2, got 3"
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// BudgetError says which budget of which backend could not serve a request
// before its deadline. It wraps ErrBudgetExhausted.
type BudgetError struct {
	Backend string
	Budget  string        // "rpm", "tpm", "concurrency" or "rate_limit_pause"
	Wait    time.Duration // how long the budget alone would have made it wait
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("backend %q %s budget needs %v, past the request's deadline", e.Backend, e.Budget, e.Wait.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrBudgetExhausted) hold.
func (e *BudgetError) Unwrap() error { return ErrBudgetExhausted }

// ErrorClass classifies an upstream failure for the retry policy.
type ErrorClass uint8

// The error classes.
const (
	ClassUnknown ErrorClass = iota
	ClassRateLimit
	ClassTimeout
	ClassNetwork
	ClassServer
	ClassAuth
	ClassInvalidRequest
	ClassInvalidResponse
	// ClassNotFound: the upstream has no such endpoint or model (HTTP 404),
	// a fault of the backend's configuration rather than of the request.
	// Like ClassAuth it is not retried and counts against the breaker.
	ClassNotFound
)

var classNames = [...]string{"unknown", "rate_limit", "timeout", "network", "server_error", "auth", "invalid_request", "invalid_response", "not_found"}

func (c ErrorClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// RateLimitInfo is what an upstream said about its limits: a Retry-After and
// the x-ratelimit-* headers. Zero fields were not given.
type RateLimitInfo struct {
	RetryAfter        time.Duration
	RemainingRequests int64 // -1: not given
	RemainingTokens   int64 // -1: not given
	// ResetRequests and ResetTokens: how long until the budget is full
	// again (OpenAI's meaning), not until one more request is allowed.
	ResetRequests time.Duration
	ResetTokens   time.Duration
	// LimitRequests and LimitTokens: the budget's size
	// (x-ratelimit-limit-*); 0: not given. With the remaining count and the
	// reset they give the refill rate, which the core learns when it was
	// told no limit.
	LimitRequests int64
	LimitTokens   int64
}

// UpstreamError is a failure reported by a backend. Its Message must be safe
// to show a caller: no secrets, no full upstream body.
type UpstreamError struct {
	Class      ErrorClass
	StatusCode int // the upstream's HTTP status, 0 when none
	Message    string
	RateLimit  *RateLimitInfo // set when the upstream said anything about its limits
	Err        error          // the cause, for logs; never shown to callers
}

func (e *UpstreamError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("upstream %s (HTTP %d): %s", e.Class, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("upstream %s: %s", e.Class, e.Message)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// ClassOf returns the class of err: an *UpstreamError's own class, else
// ClassUnknown.
func ClassOf(err error) ErrorClass {
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return ue.Class
	}
	return ClassUnknown
}
