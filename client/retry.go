package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxAttempts is how many times Submit sends a request, the first
// time included, while the service answers that it may be retried.
const DefaultMaxAttempts = 3

// WithMaxAttempts bounds how many times Submit sends one request, the first
// time included. Submit sends it again only when the service says when to:
// a RESOURCE_EXHAUSTED or UNAVAILABLE status (of the RPC, or of the
// completion) that carries a google.rpc.RetryInfo. It waits the delay the
// RetryInfo gives, and does not retry when that wait would end after the
// context's deadline: it returns the service's error at once instead. The
// caller's own cancellation is never retried: a context that ends during the
// wait ends Submit with its status (CANCELLED or DEADLINE_EXCEEDED). 1 turns
// retries off (see WithoutRetry). Default: DefaultMaxAttempts. A value below
// 1 panics, as a programming error.
func WithMaxAttempts(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("client: WithMaxAttempts(%d): must be at least 1", n))
	}
	return func(c *Client) { c.maxAttempts = n }
}

// WithoutRetry makes Submit send each request once and return the service's
// answer as it is, RetryInfo or not. It is WithMaxAttempts(1).
func WithoutRetry() Option { return WithMaxAttempts(1) }

// retryDelay is how long the service asked the caller to wait before sending
// again, when err is a status the client retries.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// waitRetry waits d, or until ctx ends. It reports false, without waiting,
// when ctx's deadline comes before d is over.
func waitRetry(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
