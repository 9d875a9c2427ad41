package client

import (
	"slices"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
)

// Flow-control windows of a connection Dial makes (HTTP/2's receive
// windows, which bound what the service may send before the client has
// read it), fixed in place of grpc-go's default: 64 KiB windows that a
// bandwidth-delay-product (BDP) estimator grows, up to 16 MiB, by pinging
// the service once for each burst of data received.
//
// Batcher's replies are mostly many small messages: a streamed answer is
// one delta of a few tokens (some 50 bytes on the wire) per message. On
// such a stream the estimator pings again and again and never finds a
// reason to grow, and the ping, its ack and their handling cost the client
// and the service CPU for every few deltas: with 100 streamed chats at once
// (bench BenchmarkStreamTTFT) about a third of what a chat through Batcher
// costs in CPU beyond the same chat straight from its upstream. Fixed
// windows send no pings.
const (
	// DefaultStreamWindow is one RPC's window: 1 MiB holds every delta of
	// a 16,000-token answer (some 20,000 messages) that the caller has not
	// read yet, so a slow reader holds up only its own stream, and only
	// far into an answer; and a reply of up to 1 MiB (a batch of
	// embeddings) arrives without waiting for a window update.
	DefaultStreamWindow int32 = 1 << 20
	// DefaultConnWindow is the connection's window, shared by its RPCs:
	// 16 MiB, the most grpc-go's estimator would grow it to, leaves room
	// for 16 RPCs' full windows at once, or hundreds of streamed answers
	// each some way behind their reader.
	DefaultConnWindow int32 = 16 << 20
)

// dynamicWindows is the marker WithDynamicWindows returns; as a dial
// option it does nothing, Dial looks for it.
type dynamicWindows struct{ grpc.EmptyDialOption }

// WithDynamicWindows, among Dial's or DialOptions' options, leaves the
// connection's flow control as grpc-go sets it by default (64 KiB windows
// grown by BDP estimation) instead of DefaultStreamWindow and
// DefaultConnWindow: for a link with a large bandwidth-delay product that
// carries large replies (a 1 MiB window passes at most 1 MiB per round
// trip on one RPC). grpc-go turns BDP estimation off for good once either
// window is set, so an option after it that sets one
// (grpc.WithInitialWindowSize, grpc.WithInitialConnWindowSize) fixes the
// windows again.
func WithDynamicWindows() grpc.DialOption { return dynamicWindows{} }

// DialOptions returns the options Dial passes to grpc.NewClient: its own
// (an otelgrpc stats handler that propagates the caller's W3C trace
// context, and the flow-control windows DefaultStreamWindow and
// DefaultConnWindow unless opts hold WithDynamicWindows), then opts, which
// override them (grpc.WithInitialWindowSize, grpc.WithInitialConnWindowSize
// set either window). For a connection made by hand and passed to New that
// should behave as Dial's does.
func DialOptions(opts ...grpc.DialOption) []grpc.DialOption {
	stats := otelgrpc.NewClientHandler(otelgrpc.WithPropagators(
		propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))
	own := []grpc.DialOption{grpc.WithStatsHandler(stats)}
	if !slices.ContainsFunc(opts, func(o grpc.DialOption) bool { _, ok := o.(dynamicWindows); return ok }) {
		own = append(own, grpc.WithInitialWindowSize(DefaultStreamWindow), grpc.WithInitialConnWindowSize(DefaultConnWindow))
	}
	return slices.Concat(own, opts)
}

// Dial creates a connection to target with grpc.NewClient and returns a
// Client that owns it: Close closes it. The connection carries Dial's own
// options (DialOptions): an otelgrpc stats handler that propagates the
// caller's W3C trace context, so a trace continues across the call, and
// fixed flow-control windows suited to many small streamed messages
// (DefaultStreamWindow, DefaultConnWindow; WithDynamicWindows for
// grpc-go's default). opts are applied after them and must include
// transport credentials.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	conn, err := grpc.NewClient(target, DialOptions(opts...)...)
	if err != nil {
		return nil, err
	}
	c := New(conn)
	c.conn = conn
	return c, nil
}
