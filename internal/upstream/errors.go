package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/batcherhq/batcher/batcher"
)

// MaxMessageBytes bounds the upstream text an error message quotes.
const MaxMessageBytes = 200

// Clean makes upstream text fit for a message: one line, printable, at
// most MaxMessageBytes.
func Clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	return Clip(strings.Join(strings.Fields(s), " "), MaxMessageBytes)
}

// Clip cuts s to n bytes at a rune boundary, marking the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// TransportError classifies a failure to get an answer from the endpoint
// ep (empty when no call was made): the caller's cancellation passes
// through as is; deadlines are timeouts; connection, reset and DNS failures
// are network errors. The message names the endpoint's path.
func TransportError(ctx context.Context, ep string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	at := ""
	if ep != "" {
		at = " (" + ep + ")"
	}
	ue := &batcher.UpstreamError{Class: batcher.ClassNetwork, Err: err}
	var dnsErr *net.DNSError
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		ue.Class, ue.Message = batcher.ClassTimeout, "no answer in time"+at
	case errors.As(err, &dnsErr):
		ue.Message = "DNS lookup of the upstream's host failed" + at
	case errors.Is(err, syscall.ECONNREFUSED):
		ue.Message = "connection refused" + at
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		ue.Message = "connection reset" + at
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		ue.Message = "connection closed before the answer" + at
	case errors.As(err, &netErr) && netErr.Timeout():
		ue.Class, ue.Message = batcher.ClassTimeout, "no answer in time"+at
	case errors.As(err, &opErr):
		ue.Message = "connection failed" + at
	default:
		ue.Message = "call failed" + at
	}
	return ue
}

// HeadersErr is the error to pass TransportError, with the caller's ctx,
// for a streamed call that failed before its response's headers came:
// context.DeadlineExceeded when the call's header timeout ended the call's
// own context cctx (derived from ctx, cancelled with that cause) while ctx
// is live, else err. cctx itself will not do as TransportError's context:
// its Err is context.Canceled whatever the cause, which TransportError
// takes for the caller's cancellation.
func HeadersErr(ctx, cctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(context.Cause(cctx), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// InvalidResponse is an answer from the endpoint ep that Batcher cannot
// use; msg says what is wrong with it.
func InvalidResponse(code int, ep, msg string, cause error) *batcher.UpstreamError {
	return &batcher.UpstreamError{Class: batcher.ClassInvalidResponse, StatusCode: code,
		Message: fmt.Sprintf("%s (HTTP %d from %s)", msg, code, ep), Err: cause}
}
