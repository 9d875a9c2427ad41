package openaiapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/fieldname"
)

// OpenAI's error types, as its API spells them in error.type.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable"
	TypeTimeout        = "timeout"
	TypeUpstream       = "upstream_error"
)

// QueueFullRetryAfter is the Retry-After sent with 429 when the core's queue
// is full: long enough for a batch or two to drain.
const QueueFullRetryAfter = time.Second

// StatusClientClosed is the status logged (and written, though nobody reads
// it) when the caller went away before its answer: nginx's 499.
const StatusClientClosed = 499

// maxUpstreamMessage bounds the upstream text a caller sees.
const maxUpstreamMessage = 256

// Error is an error in OpenAI's shape: an HTTP status and the body
// {"error": {"message", "type", "param", "code"}}.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string // the request field at fault; empty: none
	Code    string // empty: none
	// RetryAfter, when positive, is sent as Retry-After (whole seconds,
	// rounded up) and retry-after-ms.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s: %s (param %s)", e.Status, e.Type, e.Message, e.Param)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// badRequest is a 400 naming the field at fault.
func badRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// notFound is a 404.
func notFound(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// errShuttingDown answers every call once admission has closed.
var errShuttingDown = &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "shutting_down", Message: "server shutting down: retry against another instance"}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// WriteError writes err in OpenAI's error shape. An *Error is written as it
// is; errors from the core are translated (see ErrorFrom). It is exported
// so that handlers mounted beside these (WithBatches) answer alike.
func WriteError(w http.ResponseWriter, err error) {
	e := ErrorFrom(err, "")
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(e.RetryAfter.Milliseconds(), 10))
	}
	body := errorBody{Error: errorFields{Message: e.Message, Type: e.Type}}
	if e.Param != "" {
		body.Error.Param = &e.Param
	}
	if e.Code != "" {
		body.Error.Code = &e.Code
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(body) // the caller may have gone
}

// ErrorFrom is the one place where errors become OpenAI errors. An *Error
// stays as it is. From the core: bad input is 400 naming the field as the
// OpenAI request spells it (op says which request: "messages", "prompt" or
// "input" for the input); an unknown model 404; a full queue or an
// exhausted budget, a tenant's quota or the lane cap 429 with Retry-After; shutdown and a missing backend
// 503; the request's deadline 504; the caller's cancellation 499. An
// upstream failure is translated by its class, never passed through: its
// message is UpstreamError.Message, which the Backend contract keeps free
// of secrets. Anything else is 500 with a fixed message.
func ErrorFrom(err error, input string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if f := forbidden(err); f != nil {
		return f
	}
	var ie *itemError
	if errors.As(err, &ie) {
		out := *ErrorFrom(ie.err, input+"["+strconv.Itoa(ie.index)+"]")
		if out.Param == "" && out.Status == http.StatusBadRequest {
			out.Param = input + "[" + strconv.Itoa(ie.index) + "]"
		}
		return &out
	}
	var ve *batcher.ValidationError
	if errors.As(err, &ve) {
		if ve.Field == "model" {
			if strings.HasPrefix(ve.Reason, "unknown model") {
				return notFound("model", "model_not_found", "The model does not exist: %s", strings.TrimPrefix(ve.Reason, "unknown model "))
			}
		}
		return badRequest(fieldname.OpenAI(ve.Field, input, ""), "%s", ve.Reason)
	}
	switch {
	case errors.Is(err, batcher.ErrInvalid):
		return badRequest("", "invalid request")
	case errors.Is(err, batcher.ErrQuotaExceeded):
		msg, after := "tenant quota exceeded", time.Duration(0)
		var qe *batcher.QuotaError
		if errors.As(err, &qe) {
			msg, after = qe.Error(), qe.RetryAfter
		}
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "quota_exceeded", Message: msg, RetryAfter: after}
	case errors.Is(err, batcher.ErrTooManyLanes):
		// The core's estimate of when a lane makes room, as the gRPC doors.
		after := QueueFullRetryAfter
		var le *batcher.LaneLimitError
		if errors.As(err, &le) && le.RetryAfter > 0 {
			after = le.RetryAfter
		}
		msg := "too many distinct parameter sets in use: the server's lane limit is reached"
		if le != nil && le.Share > 0 {
			msg = "too many distinct parameter sets in use by this caller: it holds its fair share of the server's lanes"
		}
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "too_many_lanes", RetryAfter: after,
			Message: msg + "; retry after " + after.Round(time.Millisecond).String()}
	case errors.Is(err, batcher.ErrQueueFull):
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "queue_full",
			Message: "the server's queue is full: retry after " + QueueFullRetryAfter.String(), RetryAfter: QueueFullRetryAfter}
	case errors.Is(err, batcher.ErrClosed):
		return errShuttingDown
	case errors.Is(err, batcher.ErrShutdown):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "shutting_down", Message: "server shut down before the request completed"}
	case errors.Is(err, batcher.ErrNoBackend):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: "no_backend", Message: "no healthy backend for the model"}
	case errors.Is(err, batcher.ErrBudgetExhausted):
		// The budget's name tells the caller what is short; the backend's
		// name is operator detail and stays off the wire.
		var be *batcher.BudgetError
		if errors.As(err, &be) {
			return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "budget_exhausted", RetryAfter: be.Wait,
				Message: fmt.Sprintf("the model's %s budget cannot serve the request before its deadline: it needs %v more", be.Budget, be.Wait.Round(time.Millisecond))}
		}
		return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "budget_exhausted", Message: "the model's rate budget cannot serve the request before its deadline"}
	case errors.Is(err, batcher.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: "deadline_exceeded", Message: "request deadline exceeded"}
	case errors.Is(err, batcher.ErrCanceled), errors.Is(err, context.Canceled):
		return &Error{Status: StatusClientClosed, Type: TypeInvalidRequest, Code: "cancelled", Message: "request cancelled"}
	}
	var ue *batcher.UpstreamError
	if errors.As(err, &ue) {
		return upstreamError(ue)
	}
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: "internal error"}
}

// upstreamError translates an upstream failure by its class.
func upstreamError(ue *batcher.UpstreamError) *Error {
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
		e := &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded", Message: with("upstream rate limit reached")}
		if ue.RateLimit != nil {
			e.RetryAfter = ue.RateLimit.RetryAfter
		}
		return e
	case batcher.ClassTimeout:
		return &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: "upstream_timeout", Message: with("upstream timed out")}
	case batcher.ClassNetwork:
		return &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: "upstream_unreachable", Message: with("upstream unreachable")}
	case batcher.ClassServer:
		return &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: "upstream_server_error", Message: with("upstream server error")}
	case batcher.ClassAuth:
		// The caller cannot fix the backend's credentials; the operator can.
		// The upstream's own message may quote the credential, so it stays out.
		return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "upstream_auth", Message: "upstream rejected the backend's credentials"}
	case batcher.ClassInvalidRequest:
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "upstream_rejected", Message: with("upstream rejected the request")}
	case batcher.ClassInvalidResponse:
		return &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: "upstream_invalid_response", Message: with("upstream sent an invalid response")}
	}
	return &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: "upstream_error", Message: with("upstream failed")}
}

// chatError is ErrorFrom for a chat request, whose token cap the caller
// may have set as max_completion_tokens: a bad cap is named as it was set.
func chatError(err error, body *chatRequest) *Error {
	e := ErrorFrom(err, "messages")
	if e.Param == "max_tokens" && body.MaxCompletionTokens != nil {
		out := *e
		out.Param = fieldname.OpenAI("params.max_tokens", "messages", "max_completion_tokens")
		return &out
	}
	return e
}

// itemError is the failure of one item of an array input, by index.
type itemError struct {
	index int
	err   error
}

func (e *itemError) Error() string { return fmt.Sprintf("item %d: %v", e.index, e.err) }
func (e *itemError) Unwrap() error { return e.err }
