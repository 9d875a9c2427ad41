package batcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Streaming (Request.Stream). A streamed request goes through admission,
// its lane, the grant path (priority, concurrency, RPM and TPM budgets, the
// breaker), dispatch, retries and fallbacks like any other; what differs:
//
//   - it waits in a lane of its own kind whose batches hold one request
//     (streamBatch): the upstream call is the request's alone, never packed,
//     batched or shared with an identical request;
//   - the backend's Streamer writes the answer's deltas as they arrive into
//     the call's delta buffer (streamState), which the caller drains with
//     Call.Deltas, woken by Call.DeltasReady or its sink's DeltasReady; a
//     caller that can pass a text delta on without waiting may take it
//     straight from the Streamer's goroutine instead while nothing waits in
//     the buffer (Call.SendDeltasTo, DeltaSender);
//   - once a delta is in that buffer the caller may have read it, so the
//     request is no longer retried or moved to a fallback: a failure ends it
//     with the text streamed so far, marked Partial, and the error;
//   - an attempt's timeout bounds the wait for the first delta only (a long
//     answer is not cut short by it); after it, the backend's
//     StreamIdleTimeout bounds each silence between deltas (a stalled
//     upstream ends the request partial with ErrStreamStalled); the
//     request's deadline bounds it all;
//   - the budgets are settled from the final usage, as for a batch.
//
// Backpressure: the buffer holds up to StreamBuffer deltas (default
// DefaultStreamBuffer). Past that, text and refusal deltas coalesce into the
// last one waiting, so a slow reader gets fewer, larger deltas; once the
// deltas waiting hold more than StreamMaxUnread bytes (default
// DefaultStreamMaxUnread) the request is cancelled with ErrStreamOverflow,
// the upstream call closed, and its memory freed.

// Defaults of the streamed requests' delta buffers.
const (
	// DefaultStreamBuffer is how many deltas wait for the caller before
	// text deltas coalesce.
	DefaultStreamBuffer = 64
	// DefaultStreamMaxUnread is how many bytes of deltas may wait for the
	// caller before the request is cancelled (ErrStreamOverflow).
	DefaultStreamMaxUnread = 1 << 20
	// deltaOverhead is what a waiting delta counts beyond its text, so
	// that many tiny deltas reach the limit too.
	deltaOverhead = 64
)

// ErrStreamOverflow: a streamed request's caller left more than the limit
// of deltas unread; the request was cancelled and its upstream call closed.
var ErrStreamOverflow = errors.New("batcher: the caller reads the stream too slowly")

// WithStreamBuffer sets the bounds of each streamed request's delta buffer:
// deltas, how many deltas wait before text deltas coalesce (default
// DefaultStreamBuffer), and maxUnread, how many bytes of deltas may wait
// before the request is cancelled with ErrStreamOverflow (default
// DefaultStreamMaxUnread). New fails on a value below 1.
func WithStreamBuffer(deltas, maxUnread int) Option {
	return func(c *config) { c.streamBuffer, c.streamMaxUnread = deltas, maxUnread }
}

// streamBatch is the batch settings of the lanes of streamed requests: one
// request a batch, sent at once.
var streamBatch = BatchConfig{MaxBatchSize: 1, MinBatchSize: 1}

// Delta is one piece of a streamed answer. Concatenated, a request's text
// deltas are its Result's Text.
type Delta struct {
	Text      string
	Refusal   string
	ToolCalls []ToolCallDelta
	// FinishReason and Usage are set on the last delta of a successful
	// answer, which the core adds itself; Usage is nil when the backend
	// reported none.
	FinishReason FinishReason
	Usage        *Usage
}

// ToolCallDelta is a piece of one tool call of a streamed answer.
type ToolCallDelta struct {
	Index     int32  // the call's position among the answer's tool calls
	ID        string // on the call's first piece
	Name      string // on the call's first piece
	Arguments string // a piece of the arguments' JSON text
}

// size is what d counts against the unread limit.
func (d *Delta) size() int {
	n := deltaOverhead + len(d.Text) + len(d.Refusal)
	for i := range d.ToolCalls {
		t := &d.ToolCalls[i]
		n += len(t.ID) + len(t.Name) + len(t.Arguments) + deltaOverhead
	}
	return n
}

// mergeable reports whether d may be folded into the delta before it.
func (d *Delta) mergeable() bool {
	return len(d.ToolCalls) == 0 && d.FinishReason == FinishUnspecified && d.Usage == nil
}

// DeltaWriter takes a streamed answer's deltas from a Streamer.
type DeltaWriter interface {
	// WriteDelta hands d to the caller, in order. It never blocks and does
	// not retain d (its strings and slices are copied or kept as values).
	// It returns an error once nobody awaits the answer any more (the call
	// ended: cancelled, past its deadline, or its reader too slow); the
	// Streamer should then stop and return.
	WriteDelta(d *Delta) error
}

// Streamer is implemented by a Backend that can stream answers. A streamed
// request on a backend that is not a Streamer gets its whole answer as one
// delta.
type Streamer interface {
	// Stream sends b, which holds one request of a chat or completion
	// route, upstream, and writes each piece of the answer to w as it
	// arrives. It returns how the answer ended: FinishReason and Usage (the
	// core assembles the text from the deltas; a Text returned is used only
	// when no delta was written). Errors are as Dispatch's: wrap an
	// *UpstreamError to say how the call failed. Stream honours ctx: once
	// it is done, it closes the upstream call and returns.
	Stream(ctx context.Context, b *Batch, w DeltaWriter) (Response, error)
}

// DeltaNotifier is an optional interface of an EventSink. The sink of a
// streamed request that implements it is told when the request's delta
// buffer goes from empty to holding deltas; it takes them later with
// Call.Deltas. Every such notice comes before the request's EventDone.
// DeltasReady is called with the buffer's lock held: it must not block, and
// must not call c's methods.
type DeltaNotifier interface {
	DeltasReady(c *Call)
}

// DeltaSender is what a streamed call's reader may give the core
// (Call.SendDeltasTo) to take text deltas straight from the Streamer's
// goroutine: while no delta waits in the call's buffer, WriteDelta offers
// each text or refusal delta to TrySendDelta before it buffers it, which
// saves the delta the buffer and the reader's wake-up.
type DeltaSender interface {
	// TrySendDelta delivers d to the caller and reports true, or reports
	// false at once when it cannot without waiting (the caller reads
	// slowly, or a send of the reader's is under way); d then waits in the
	// buffer as any other, bounded as any other. It is called with the
	// call's buffer locked, before the call can end: it must not block,
	// must not call the call's methods, and must not retain d. So that a
	// delta sent straight never overtakes the ones before it, the reader
	// holds TrySendDelta off (makes it report false) from each take of
	// waiting deltas (Call.Deltas) to the end of their sending.
	TrySendDelta(d *Delta) bool
}

// SendDeltasTo makes s the taker of the call's text deltas while none
// waits in its buffer (DeltaSender), until the call ends. A call that is
// not streamed has no deltas.
func (c *Call) SendDeltasTo(s DeltaSender) {
	if c.stream == nil {
		return
	}
	c.stream.mu.Lock()
	if !c.stream.closed {
		c.stream.sender = s
	}
	c.stream.mu.Unlock()
}

// streamState is a streamed call's delta buffer and the answer so far.
//
// Ownership: every field is guarded by mu, except onFirst, which the
// dispatch worker running the call's attempt sets before the attempt and
// clears after it (WriteDelta runs on the Streamer's goroutine, inside that
// attempt). Writers are the backend (WriteDelta) and the finisher (end);
// the reader is the caller (take).
type streamState struct {
	c        *Call
	notifier DeltaNotifier // the sink's, or nil
	ready    chan struct{} // capacity 1: deltas wait, or the stream ended

	mu      sync.Mutex
	sender  DeltaSender // the reader's, or nil (SendDeltasTo)
	pending []Delta     // waiting for the caller, in order
	unread  int         // what pending counts against the limit
	merging bool        // pending's last delta has text in tail (coalescing)
	tail    strings.Builder
	tailRef strings.Builder
	closed  bool // the call has its result: nothing more is taken in
	drained bool // closed and every delta taken
	started bool // a delta was taken in: no retry, no fallback
	firstAt time.Time
	lastAt  time.Time
	deltas  int             // content deltas taken in
	text    strings.Builder // the answer's text so far
	refusal strings.Builder // its refusal so far
	tools   []toolAcc       // its tool calls so far, by index
	onFirst *runCtx         // its timer switches from the attempt timeout to the idle timeout at the first delta
}

func newStreamState(c *Call) *streamState {
	s := &streamState{c: c, ready: make(chan struct{}, 1)}
	if sink := c.req.Sink; sink != nil {
		s.notifier, _ = sink.(DeltaNotifier)
	}
	return s
}

// signalLocked tells the reader that the buffer has news.
func (s *streamState) signalLocked() {
	if s.notifier != nil {
		s.notifier.DeltasReady(s.c)
	}
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// WriteDelta is the DeltaWriter the core hands a Streamer.
func (s *streamState) WriteDelta(d *Delta) error {
	if d.Text == "" && d.Refusal == "" && len(d.ToolCalls) == 0 {
		return nil // nothing to pass on (a role-only or empty chunk)
	}
	now := time.Now()
	c := s.c
	b := c.b
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errStreamEnded
	}
	first := !s.started
	if first {
		s.started, s.firstAt = true, now
	}
	s.lastAt = now
	s.deltas++
	s.text.WriteString(d.Text)
	s.refusal.WriteString(d.Refusal)
	for i := range d.ToolCalls {
		s.addToolLocked(&d.ToolCalls[i])
	}
	sz := d.size()
	wasEmpty := len(s.pending) == 0
	switch {
	case wasEmpty && s.sender != nil && d.mergeable() && s.sender.TrySendDelta(d):
		// The reader's sender took it: nothing waits, nobody to wake.
		sz, wasEmpty = 0, false
	case len(s.pending) >= b.cfg.streamBuffer && d.mergeable() && s.pending[len(s.pending)-1].mergeable():
		// The reader is behind: fold the text into the last delta waiting.
		last := &s.pending[len(s.pending)-1]
		if !s.merging {
			s.merging = true
			s.tail.Reset()
			s.tailRef.Reset()
			s.tail.WriteString(last.Text)
			s.tailRef.WriteString(last.Refusal)
		}
		s.tail.WriteString(d.Text)
		s.tailRef.WriteString(d.Refusal)
		sz -= deltaOverhead
	default:
		s.sealLocked()
		s.pending = append(s.pending, *d)
		if len(d.ToolCalls) > 0 { // the caller's slice is not ours to keep
			s.pending[len(s.pending)-1].ToolCalls = append([]ToolCallDelta(nil), d.ToolCalls...)
		}
	}
	s.unread += sz
	overflow := s.unread > b.cfg.streamMaxUnread
	if wasEmpty {
		s.signalLocked()
	}
	onFirst := s.onFirst
	if first {
		s.onFirst = nil
	}
	s.mu.Unlock()
	if first {
		if onFirst != nil {
			onFirst.streamStarted()
		}
		if c.span != nil && c.span.IsRecording() {
			c.span.AddEvent("gen_ai.first_token", trace.WithTimestamp(now), trace.WithAttributes(
				attribute.Float64("gen_ai.server.time_to_first_token", c.since(now).Seconds())))
		}
	}
	if overflow {
		c.finish(Result{Err: fmt.Errorf("%w: more than %d bytes of deltas unread", ErrStreamOverflow, b.cfg.streamMaxUnread)}, now)
		return errStreamEnded
	}
	return nil
}

// errStreamEnded is WriteDelta's answer once the call has its result.
var errStreamEnded = errors.New("batcher: the streamed request already ended")

// sealLocked ends coalescing: the text folded so far becomes the last
// waiting delta's.
func (s *streamState) sealLocked() {
	if !s.merging {
		return
	}
	last := &s.pending[len(s.pending)-1]
	last.Text, last.Refusal = s.tail.String(), s.tailRef.String()
	s.tail, s.tailRef = strings.Builder{}, strings.Builder{} // the strings are the delta's now
	s.merging = false
}

// hasStarted reports whether a delta reached the caller's buffer.
func (s *streamState) hasStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// setOnFirst sets the run context whose timer the first delta switches
// from the attempt timeout to the idle timeout, unless it already came.
func (s *streamState) setOnFirst(f *runCtx) {
	s.mu.Lock()
	if !s.started {
		s.onFirst = f
	}
	s.mu.Unlock()
}

// end closes the buffer as the call takes its result r: a successful
// answer gets its last delta (finish reason and usage) and the whole text;
// a failed one that had started is marked partial and keeps the text
// streamed so far.
func (s *streamState) end(r *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.onFirst = nil
	s.sender = nil
	if s.started {
		r.Timings.FirstToken = s.c.since(s.firstAt)
	}
	if r.Err != nil {
		if s.started {
			r.Partial = true
			r.Text = s.text.String()
			r.Chat = s.chatOutput(r.Chat, true)
		}
	} else {
		if s.started || r.Text == "" {
			r.Text = s.text.String()
			r.Chat = s.chatOutput(r.Chat, false)
		} else if r.Text != "" {
			// A backend that wrote no delta but answered: one delta with all.
			s.pending = append(s.pending, Delta{Text: r.Text})
		}
		s.sealLocked()
		last := Delta{FinishReason: r.FinishReason}
		if r.Usage.Total() > 0 {
			u := r.Usage
			last.Usage = &u
		}
		s.pending = append(s.pending, last)
	}
	s.sealLocked()
	if len(s.pending) == 0 {
		s.drained = true
	}
	s.signalLocked()
}

// take appends the waiting deltas to dst; more is false once the call has
// its result and every delta was taken.
func (s *streamState) take(dst []Delta) ([]Delta, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealLocked()
	dst = append(dst, s.pending...)
	clear(s.pending)
	s.pending = s.pending[:0]
	if cap(s.pending) > 8 {
		s.pending = nil // a burst's array goes: an open stream stays small
	}
	s.unread = 0
	if s.closed {
		s.drained = true
	}
	return dst, !s.drained
}

// JoinDeltas joins each run of consecutive text and refusal deltas of ds
// into one, in place, and returns the shortened slice; deltas with
// tool-call pieces, a finish reason or usage stay as they are. A sender
// that takes a request's waiting deltas (Call.Deltas) joins them before it
// writes them to a shared connection, so a request whose deltas piled up
// while the connection was busy takes one message, not one per token, and
// the messages of other requests queued behind it wait for that one.
func JoinDeltas(ds []Delta) []Delta {
	out := ds[:0]
	for i := 0; i < len(ds); {
		j := i + 1
		if ds[i].mergeable() {
			for j < len(ds) && ds[j].mergeable() {
				j++
			}
		}
		d := ds[i]
		if j-i > 1 {
			var text, ref strings.Builder
			for k := i; k < j; k++ {
				text.WriteString(ds[k].Text)
				ref.WriteString(ds[k].Refusal)
			}
			d.Text, d.Refusal = text.String(), ref.String()
		}
		out = append(out, d)
		i = j
	}
	clear(ds[len(out):])
	return out
}

// Streamed reports whether the call's request asked for its answer
// streamed.
func (c *Call) Streamed() bool { return c.stream != nil }

// Deltas appends the deltas of a streamed call that wait for the caller to
// dst and returns it. more is false once the call has its result and every
// delta was taken: the last delta of a successful answer has its
// FinishReason set. A call that is not streamed has no deltas.
func (c *Call) Deltas(dst []Delta) (ds []Delta, more bool) {
	if c.stream == nil {
		return dst, false
	}
	return c.stream.take(dst)
}

// DeltasReady returns a channel that receives when deltas wait to be
// taken or the stream ended. It has room for one wake-up: take every delta
// (Deltas) each time it fires. Nil for a call that is not streamed.
func (c *Call) DeltasReady() <-chan struct{} {
	if c.stream == nil {
		return nil
	}
	return c.stream.ready
}

// NextDeltas waits until deltas wait or the stream ended, and returns them
// as Deltas does. When ctx ends first it returns ctx's error (the call goes
// on: cancel it to stop it).
func (c *Call) NextDeltas(ctx context.Context, dst []Delta) ([]Delta, bool, error) {
	for {
		ds, more := c.Deltas(dst)
		if len(ds) > len(dst) || !more {
			return ds, more, nil
		}
		select {
		case <-c.stream.ready:
		case <-ctx.Done():
			return dst, true, ctx.Err()
		}
	}
}
