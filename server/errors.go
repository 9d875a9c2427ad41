package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/fieldname"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// QueueFullRetryDelay is the RetryInfo delay sent with RESOURCE_EXHAUSTED when
// the server's queue is full: long enough for a batch or two to drain.
const QueueFullRetryDelay = time.Second

// maxUpstreamMessage bounds the upstream text a caller sees, in case a
// backend put more than a short summary into UpstreamError.Message.
const maxUpstreamMessage = 256

// toStatus is the one place where errors from the core become gRPC statuses.
//
// Bad input becomes INVALID_ARGUMENT naming the field as a path into the
// Request message, under "request." (fieldname.Proto: the proto's names,
// as the caller set them); a full queue RESOURCE_EXHAUSTED with a
// RetryInfo; a route or priority the tenant may not use PERMISSION_DENIED;
// a revoked credential UNAUTHENTICATED; a tenant's quota
// RESOURCE_EXHAUSTED naming the quota, with a
// RetryInfo when a retry can pass; an exhausted rate budget
// RESOURCE_EXHAUSTED; shutdown and a
// missing backend UNAVAILABLE; deadlines and
// cancellation their own codes. An upstream failure is translated by its
// class, never passed through: its message is UpstreamError.Message, which
// the Backend contract keeps free of secrets, and never the wrapped cause or
// the upstream's own status code. Anything unexpected is INTERNAL with a
// fixed message, so that no internal detail crosses the wire; callers log
// the original error.
func toStatus(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	var ve *batcher.ValidationError
	if errors.As(err, &ve) {
		return invalidArgument("request."+fieldname.Proto(ve.Field), ve.Reason)
	}
	switch {
	case errors.Is(err, batcher.ErrInvalid):
		return status.New(codes.InvalidArgument, "invalid request")
	case errors.Is(err, batcher.ErrForbidden):
		// The message names the route or priority the caller gave and its
		// own tenant (batcher.AccessError), never what exists.
		return status.New(codes.PermissionDenied, err.Error())
	case errors.Is(err, batcher.ErrRevoked):
		return status.New(codes.Unauthenticated, "unauthenticated: credential revoked")
	case errors.Is(err, batcher.ErrQuotaExceeded):
		// The message names the caller's own tenant and the quota, for
		// example `tenant "team-a": quota tpm exceeded: limit 20000 tokens a minute`.
		var qe *batcher.QuotaError
		if errors.As(err, &qe) {
			st := status.New(codes.ResourceExhausted, qe.Error())
			if qe.RetryAfter > 0 {
				st = withRetry(st, qe.RetryAfter)
			}
			return st
		}
		return status.New(codes.ResourceExhausted, "tenant quota exceeded")
	case errors.Is(err, batcher.ErrTooManyLanes):
		// The core's estimate of when a lane makes room.
		after := QueueFullRetryDelay
		var le *batcher.LaneLimitError
		if errors.As(err, &le) && le.RetryAfter > 0 {
			after = le.RetryAfter
		}
		msg := "too many distinct parameter sets in use: the server's lane limit is reached"
		if le != nil && le.Share > 0 {
			msg = "too many distinct parameter sets in use by this caller: it holds its fair share of the server's lanes"
		}
		return withRetry(status.New(codes.ResourceExhausted, msg+"; retry after "+after.Round(time.Millisecond).String()), after)
	case errors.Is(err, batcher.ErrQueueFull):
		return withRetry(status.New(codes.ResourceExhausted, "queue full: retry after "+QueueFullRetryDelay.String()), QueueFullRetryDelay)
	case errors.Is(err, batcher.ErrClosed):
		return status.New(codes.Unavailable, "server shutting down")
	case errors.Is(err, batcher.ErrShutdown):
		return status.New(codes.Unavailable, "server shut down before the request completed")
	case errors.Is(err, batcher.ErrNoBackend):
		return status.New(codes.Unavailable, "no healthy backend for the model")
	case errors.Is(err, batcher.ErrBudgetExhausted):
		// The budget's name tells the caller what is short; the backend's
		// name is operator detail and stays off the wire.
		var be *batcher.BudgetError
		if errors.As(err, &be) {
			st := status.New(codes.ResourceExhausted, fmt.Sprintf("the model's %s budget cannot serve the request before its deadline: it needs %v more",
				be.Budget, be.Wait.Round(time.Millisecond)))
			return withRetry(st, be.Wait)
		}
		return status.New(codes.ResourceExhausted, "the model's rate budget cannot serve the request before its deadline")
	case errors.Is(err, batcher.ErrDeadline):
		return status.New(codes.DeadlineExceeded, "request deadline exceeded")
	case errors.Is(err, batcher.ErrCanceled):
		return status.New(codes.Canceled, "request cancelled")
	case errors.Is(err, batcher.ErrStreamOverflow):
		// The caller's own slowness: the message says which limit.
		return status.New(codes.ResourceExhausted, "stream cancelled: the caller read its deltas too slowly ("+err.Error()+")")
	}
	var ue *batcher.UpstreamError
	if errors.As(err, &ue) {
		return upstreamStatus(ue)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, "request deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, "request cancelled")
	}
	return status.New(codes.Internal, "internal error")
}

// upstreamStatus translates an upstream failure by its class.
func upstreamStatus(ue *batcher.UpstreamError) *status.Status {
	msg := ue.Message
	if len(msg) > maxUpstreamMessage {
		msg = msg[:maxUpstreamMessage] + "..."
	}
	with := func(prefix string) string {
		if msg == "" {
			return prefix
		}
		return prefix + ": " + msg
	}
	switch ue.Class {
	case batcher.ClassRateLimit:
		st := status.New(codes.ResourceExhausted, with("upstream rate limit reached"))
		if ue.RateLimit != nil && ue.RateLimit.RetryAfter > 0 {
			st = withRetry(st, ue.RateLimit.RetryAfter)
		}
		return st
	case batcher.ClassTimeout:
		return status.New(codes.DeadlineExceeded, with("upstream timed out"))
	case batcher.ClassNetwork:
		return status.New(codes.Unavailable, with("upstream unreachable"))
	case batcher.ClassServer:
		return status.New(codes.Unavailable, with("upstream server error"))
	case batcher.ClassAuth:
		// The caller cannot fix the backend's credentials; the operator can.
		// The upstream's own message may quote the credential, so it stays out.
		return status.New(codes.Internal, "upstream rejected the backend's credentials")
	case batcher.ClassInvalidRequest:
		return status.New(codes.InvalidArgument, with("upstream rejected the request"))
	case batcher.ClassInvalidResponse:
		return status.New(codes.Internal, with("upstream sent an invalid response"))
	case batcher.ClassNotFound:
		// The backend's base URL or model is wrong: the operator's to fix,
		// and no retry by the caller helps until then.
		return status.New(codes.FailedPrecondition, with("upstream endpoint or model not found"))
	}
	return status.New(codes.Unknown, with("upstream failed"))
}

// invalidArgument is INVALID_ARGUMENT with the message "field: reason" and
// a BadRequest detail naming the field.
func invalidArgument(field, reason string) *status.Status {
	st := status.New(codes.InvalidArgument, field+": "+reason)
	if d, err := st.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: reason}},
	}); err == nil {
		st = d
	}
	return st
}

// withRetry attaches a RetryInfo saying when to try again.
func withRetry(st *status.Status, after time.Duration) *status.Status {
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		return d
	}
	return st
}
