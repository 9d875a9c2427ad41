package batcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// streamBackend is the innermost dispatch layer: it sends a streamed
// request's batch (one request) through the backend's Streamer, or, for a
// backend that cannot stream, dispatches it and passes the whole answer on
// as one delta.
type streamBackend struct{ next Backend }

func (d streamBackend) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	s := b.stream
	if s == nil {
		return d.next.Dispatch(ctx, b, out)
	}
	st, ok := d.next.(Streamer)
	if !ok {
		err := d.next.Dispatch(ctx, b, out)
		if err == nil && out[0].Err == nil {
			_ = s.WriteDelta(&Delta{Text: out[0].Text})
		}
		return err
	}
	resp, err := st.Stream(ctx, b, s)
	if err != nil {
		out[0] = Response{Err: err}
		return err
	}
	out[0] = resp
	return nil
}

// dispatchStream is attemptTimeout for a streamed batch: the timeout
// bounds the wait for the first delta; after it, the idle timeout bounds
// each silence between deltas. The run's context and its pooled timer
// serve both (runCtx.expireStream): the first delta re-arms the timer for
// the idle timeout, and when it fires it looks at the last delta's time
// and re-arms for the rest, so a delta costs no timer call, and an attempt
// no context or timer of its own.
func (d attemptTimeout) dispatchStream(ctx context.Context, b *Batch, out []Response) error {
	s := b.stream
	timeout := d.timeoutFor(b, time.Now())
	idle := d.idle
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	rc := b.run.ctx // ctx, or its ancestor: a batch makes one attempt
	rc.expireStream(timeout, s, idle)
	s.setOnFirst(rc)
	err := d.next.Dispatch(ctx, b, out)
	cause := rc.stopStream()
	s.setOnFirst(nil)
	if err != nil {
		switch {
		case errors.Is(cause, errAttemptTimeout):
			err = attemptTimedOut(timeout, err)
			out[0].Err = err
		case errors.Is(cause, errStreamIdle):
			err = &UpstreamError{Class: ClassTimeout, Message: fmt.Sprintf("the stream stalled: no delta for %v", idle.Round(time.Millisecond)),
				Err: errors.Join(ErrStreamStalled, err)}
			out[0].Err = err
		}
	}
	return err
}

// ErrStreamStalled: a streamed answer's upstream sent nothing for longer
// than its backend's StreamIdleTimeout after the first delta; the call was
// closed and the request ended with the text streamed so far, partial.
var ErrStreamStalled = errors.New("batcher: the upstream stalled mid-stream")

// errStreamIdle is the cause with which the idle timeout ends an attempt.
var errStreamIdle = errors.New("stream idle")

// retryable reports whether a failed attempt of c may be retried or moved
// to a fallback: not once a streamed answer has reached its caller.
func (c *Call) retryable() bool { return c.stream == nil || !c.stream.hasStarted() }

// The GenAI semantic conventions' buckets for the streaming histograms.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	tpotBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
)

// streamed records a successful streamed answer's time to first token and
// time per output token (gen_ai.server.*: Batcher serves its callers),
// with the attributes of its route and backend's gen_ai operation.
func (m *metrics) streamed(c *Call, r *Result) {
	if r.Timings.FirstToken <= 0 {
		return
	}
	pm := (*m.pairs.Load())[routeBackend{c.rc.Name, r.Backend}]
	if pm == nil {
		return
	}
	pm.ttft.seconds(r.Timings.FirstToken)
	// After the first token: by the tokens the backend counted, else by the
	// deltas (one token each, as most providers send them).
	n := int(r.Usage.CompletionTokens)
	if n == 0 {
		n = c.stream.deltas // stable: the stream is closed
	}
	if n > 1 {
		pm.tpot.float((r.Timings.Total - r.Timings.FirstToken).Seconds() / float64(n-1))
	}
}

// toolAcc is one tool call of a streamed answer, assembled from its pieces.
type toolAcc struct {
	index    int32
	id, name string
	args     strings.Builder
}

// addToolLocked adds a tool-call piece to the answer so far.
func (s *streamState) addToolLocked(t *ToolCallDelta) {
	var a *toolAcc
	for i := range s.tools {
		if s.tools[i].index == t.Index {
			a = &s.tools[i]
			break
		}
	}
	if a == nil {
		s.tools = append(s.tools, toolAcc{index: t.Index})
		a = &s.tools[len(s.tools)-1]
	}
	if t.ID != "" {
		a.id = t.ID
	}
	if t.Name != "" {
		a.name = t.Name
	}
	a.args.WriteString(t.Arguments)
}

// toolCalls returns the answer's tool calls, in the order they began.
// chatOutput returns have (a result's chat output, nil or shared, so never
// written) with the refusal and tool calls the deltas made: in place of
// have's when replace, else only where have has none. Nil when it holds
// nothing.
func (s *streamState) chatOutput(have *ChatOutput, replace bool) *ChatOutput {
	var o ChatOutput
	if have != nil {
		o = *have
	}
	if replace || o.Refusal == "" {
		o.Refusal = s.refusal.String()
	}
	if replace || o.ToolCalls == nil {
		o.ToolCalls = s.toolCalls()
	}
	if o.Refusal == "" && o.ToolCalls == nil && o.Logprobs == nil && o.Choices == nil {
		return nil
	}
	return &o
}

func (s *streamState) toolCalls() []ToolCall {
	if len(s.tools) == 0 {
		return nil
	}
	out := make([]ToolCall, len(s.tools))
	for i := range s.tools {
		out[i] = ToolCall{ID: s.tools[i].id, Name: s.tools[i].name, Arguments: s.tools[i].args.String()}
	}
	return out
}
