package client

import (
	"fmt"
	"time"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Limits of StreamOptions.summary_interval, as the service enforces them.
const (
	MinSummaryInterval = 100 * time.Millisecond
	MaxSummaryInterval = time.Hour
)

// StreamOption configures a Stream.
type StreamOption func(*streamConfig)

// streamConfig is the resolved configuration of one Stream; read-only once
// the stream starts.
type streamConfig struct {
	verbosity       batcherv1.Verbosity
	summaryInterval time.Duration // 0: the service's default
	onEvent         func(*batcherv1.Event)
	events          chan<- *batcherv1.Event
	onSummary       func(*batcherv1.StreamSummary)
	onRejection     func(*batcherv1.Rejection)
}

// WithVerbosity chooses what the service sends back. Default: VERBOSITY_ALL
// when OnEvent or WithEvents is set, VERBOSITY_COMPLETIONS otherwise (no one
// would read the events). A value that is not a known Verbosity fails Stream.
func WithVerbosity(v batcherv1.Verbosity) StreamOption {
	return func(c *streamConfig) { c.verbosity = v }
}

// WithSummaryInterval sets how often the service sends a StreamSummary.
// Default: the service's (1s). A value outside MinSummaryInterval to
// MaxSummaryInterval fails Stream.
func WithSummaryInterval(d time.Duration) StreamOption {
	return func(c *streamConfig) { c.summaryInterval = d }
}

// OnEvent calls f with every progress event, in the order the service sent
// them, from the stream's one receive goroutine. Every event of a request is
// delivered before its handle resolves. f must return promptly: while it
// runs the stream reads nothing more. f must not call the stream's methods
// or wait on its handles. Default: none.
func OnEvent(f func(*batcherv1.Event)) StreamOption {
	return func(c *streamConfig) { c.onEvent = f }
}

// WithEvents sends every progress event on ch, after OnEvent's callback, in
// the order the service sent them; every event of a request is sent before
// its handle resolves. A full ch holds up the stream, and gRPC flow control
// passes that back to the service, until the stream ends; the stream closes
// ch when it ends, so ch must not be shared. Default: none.
func WithEvents(ch chan<- *batcherv1.Event) StreamOption {
	return func(c *streamConfig) { c.events = ch }
}

// OnSummary calls f with every StreamSummary, from the receive goroutine,
// under the same rules as OnEvent. The last one has Final set. Default: none.
func OnSummary(f func(*batcherv1.StreamSummary)) StreamOption {
	return func(c *streamConfig) { c.onSummary = f }
}

// OnRejection calls f with every Rejection that answers no pending request,
// such as a rejected Cancel or Flush, from the receive goroutine, under the
// same rules as OnEvent. A rejected request is reported by its handle
// instead. Default: none.
func OnRejection(f func(*batcherv1.Rejection)) StreamOption {
	return func(c *streamConfig) { c.onRejection = f }
}

func newStreamConfig(opts []StreamOption) (streamConfig, error) {
	var c streamConfig
	for _, o := range opts {
		o(&c)
	}
	if _, ok := batcherv1.Verbosity_name[int32(c.verbosity)]; !ok {
		return c, fmt.Errorf("client: verbosity: unknown value %d", c.verbosity)
	}
	if c.summaryInterval != 0 && (c.summaryInterval < MinSummaryInterval || c.summaryInterval > MaxSummaryInterval) {
		return c, fmt.Errorf("client: summary_interval: %v is outside %v to %v", c.summaryInterval, MinSummaryInterval, MaxSummaryInterval)
	}
	if c.verbosity == batcherv1.Verbosity_VERBOSITY_UNSPECIFIED && c.onEvent == nil && c.events == nil {
		c.verbosity = batcherv1.Verbosity_VERBOSITY_COMPLETIONS
	}
	return c, nil
}

// optionsMessage is the stream's first message, or nil when the service's
// defaults are wanted.
func (c *streamConfig) optionsMessage() *batcherv1.SubmitStreamRequest {
	if c.verbosity == batcherv1.Verbosity_VERBOSITY_UNSPECIFIED && c.summaryInterval == 0 {
		return nil
	}
	o := &batcherv1.StreamOptions{Verbosity: c.verbosity}
	if c.summaryInterval != 0 {
		o.SummaryInterval = durationpb.New(c.summaryInterval)
	}
	return &batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Options{Options: o}}
}
