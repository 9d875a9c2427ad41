package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	secret := errors.New("POST https://api.example/v1: 401 {\"error\":\"bad key sk-SECRET\"}")
	up := func(c batcher.ErrorClass, msg string) error {
		return fmt.Errorf("dispatch: %w", &batcher.UpstreamError{Class: c, StatusCode: 599, Message: msg, Err: secret})
	}
	tests := []struct {
		name  string
		err   error
		code  codes.Code
		msg   string        // exact message
		retry time.Duration // RetryInfo delay, 0: none
	}{
		{"nil", nil, codes.OK, "", 0},
		{"validation", &batcher.ValidationError{Field: "params.temperature", Reason: "must be 0 to 2, got 3"},
			codes.InvalidArgument, "request.params.temperature: must be 0 to 2, got 3", 0},
		{"wrapped validation", fmt.Errorf("x: %w", &batcher.ValidationError{Field: "model", Reason: "must be set"}),
			codes.InvalidArgument, "request.model: must be set", 0},
		{"invalid", batcher.ErrInvalid, codes.InvalidArgument, "invalid request", 0},
		{"queue full", batcher.ErrQueueFull, codes.ResourceExhausted, "queue full: retry after 1s", time.Second},
		{"lane cap", &batcher.LaneLimitError{Open: 4, Limit: 4, RetryAfter: 150 * time.Millisecond}, codes.ResourceExhausted,
			"too many distinct parameter sets in use: the server's lane limit is reached; retry after 150ms", 150 * time.Millisecond},
		{"lane share", &batcher.LaneLimitError{Open: 3, Limit: 4, Share: 2, Held: 2, RetryAfter: 40 * time.Millisecond}, codes.ResourceExhausted,
			"too many distinct parameter sets in use by this caller: it holds its fair share of the server's lanes; retry after 40ms", 40 * time.Millisecond},
		{"tenant quota", fmt.Errorf("w: %w", &batcher.QuotaError{Tenant: "team-a", Quota: batcher.QuotaTPM, Limit: 20000, RetryAfter: 3 * time.Second}),
			codes.ResourceExhausted, `tenant "team-a": quota tpm exceeded: limit 20000 tokens a minute`, 3 * time.Second},
		{"tenant quota no retry", &batcher.QuotaError{Tenant: "team-a", Quota: batcher.QuotaTPM, Limit: 100, Need: 300},
			codes.ResourceExhausted, `tenant "team-a": quota tpm exceeded: limit 100 tokens a minute; the request's estimated 300 tokens are more than the whole quota`, 0},
		{"closed", batcher.ErrClosed, codes.Unavailable, "server shutting down", 0},
		{"shutdown", fmt.Errorf("w: %w", batcher.ErrShutdown), codes.Unavailable, "server shut down before the request completed", 0},
		{"no backend", batcher.ErrNoBackend, codes.Unavailable, "no healthy backend for the model", 0},
		{"budget", &batcher.BudgetError{Backend: "openai", Budget: "tpm", Wait: 3 * time.Minute},
			codes.ResourceExhausted, "the model's tpm budget cannot serve the request before its deadline: it needs 3m0s more", 3 * time.Minute},
		{"bare budget", batcher.ErrBudgetExhausted,
			codes.ResourceExhausted, "the model's rate budget cannot serve the request before its deadline", 0},
		{"deadline", batcher.ErrDeadline, codes.DeadlineExceeded, "request deadline exceeded", 0},
		{"canceled", batcher.ErrCanceled, codes.Canceled, "request cancelled", 0},
		{"context deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "request deadline exceeded", 0},
		{"context canceled", context.Canceled, codes.Canceled, "request cancelled", 0},
		{"rate limit", up(batcher.ClassRateLimit, "slow down"), codes.ResourceExhausted, "upstream rate limit reached: slow down", 0},
		{"rate limit retry-after", &batcher.UpstreamError{Class: batcher.ClassRateLimit, Message: "slow down",
			RateLimit: &batcher.RateLimitInfo{RetryAfter: 7 * time.Second}},
			codes.ResourceExhausted, "upstream rate limit reached: slow down", 7 * time.Second},
		{"timeout", up(batcher.ClassTimeout, "no answer in 30s"), codes.DeadlineExceeded, "upstream timed out: no answer in 30s", 0},
		{"network", up(batcher.ClassNetwork, "connection refused"), codes.Unavailable, "upstream unreachable: connection refused", 0},
		{"server", up(batcher.ClassServer, "overloaded"), codes.Unavailable, "upstream server error: overloaded", 0},
		{"auth", up(batcher.ClassAuth, "bad key sk-SECRET"), codes.Internal, "upstream rejected the backend's credentials", 0},
		{"invalid request", up(batcher.ClassInvalidRequest, "context too long"), codes.InvalidArgument, "upstream rejected the request: context too long", 0},
		{"invalid response", up(batcher.ClassInvalidResponse, "3 answers for 4 requests"), codes.Internal, "upstream sent an invalid response: 3 answers for 4 requests", 0},
		{"not found", up(batcher.ClassNotFound, "HTTP 404 Not Found from /v1/chat/completions"), codes.FailedPrecondition,
			"upstream endpoint or model not found: HTTP 404 Not Found from /v1/chat/completions", 0},
		{"unknown class", up(batcher.ClassUnknown, "backend failed"), codes.Unknown, "upstream failed: backend failed", 0},
		{"no message", up(batcher.ClassServer, ""), codes.Unavailable, "upstream server error", 0},
		{"anything else", errors.New("disk on fire: /etc/secret"), codes.Internal, "internal error", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := toStatus(tt.err)
			if st.Code() != tt.code || st.Message() != tt.msg {
				t.Fatalf("toStatus = %v %q, want %v %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
			if m := st.Message(); strings.Contains(m, "SECRET") || strings.Contains(m, "599") || strings.Contains(m, "api.example") {
				t.Errorf("message leaks upstream detail: %q", m)
			}
			var got time.Duration
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					got = ri.GetRetryDelay().AsDuration()
				}
			}
			if got != tt.retry {
				t.Errorf("RetryInfo delay = %v, want %v", got, tt.retry)
			}
		})
	}
}

func TestToStatusBadRequestDetail(t *testing.T) {
	st := toStatus(&batcher.ValidationError{Field: "input", Reason: "must be set"})
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			fv := br.GetFieldViolations()
			if len(fv) != 1 || fv[0].GetField() != "request.input" || fv[0].GetDescription() != "must be set" {
				t.Fatalf("BadRequest = %v", br)
			}
			return
		}
	}
	t.Fatalf("no BadRequest detail in %v", st.Proto())
}

func TestToStatusTruncatesLongUpstreamMessage(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	st := toStatus(&batcher.UpstreamError{Class: batcher.ClassServer, Message: long})
	if n := len(st.Message()); n > maxUpstreamMessage+64 {
		t.Fatalf("message is %d bytes, want at most about %d", n, maxUpstreamMessage)
	}
	if status.Code(st.Err()) != codes.Unavailable {
		t.Fatalf("code = %v", st.Code())
	}
}
