package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/upstream"
)

var _ batcher.Streamer = (*Backend)(nil)

// maxEventBytes bounds one server-sent event of a streamed answer.
const maxEventBytes = 1 << 20

// streamOptions is the body's stream_options: usage in a last chunk.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type streamChatRequest struct {
	chatRequest
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamCompletionRequest struct {
	completionRequest
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

// Stream implements batcher.Streamer: the batch's one request as a
// streamed call (stream: true, stream_options.include_usage), each
// chunk's content, refusal and tool-call fragments written to w as they
// arrive. The call's Timeout bounds the wait for the response's headers
// only: the core's attempt timeout bounds the wait for the first delta,
// and the request's deadline the whole answer. Once ctx ends the
// connection is closed at once.
func (b *Backend) Stream(ctx context.Context, batch *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	if len(batch.Requests) != 1 {
		return batcher.Response{}, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "a streamed batch holds one request",
			Err: fmt.Errorf("openai: %d requests", len(batch.Requests))}
	}
	r := batch.Requests[0]
	var path string
	var body any
	opts := &streamOptions{IncludeUsage: true}
	switch batch.Op {
	case batcher.OpChat:
		path = "/chat/completions"
		msgs := wireMessages(r.Input.Messages)
		body = streamChatRequest{chatRequest: b.newChatRequest(batch, 0, msgs, maxTokensOf(batch, 0)), Stream: true, StreamOptions: opts}
	case batcher.OpCompletion:
		path = "/completions"
		req := completionRequest{Model: batch.Model, Prompt: []string{r.Input.Prompt}, MaxTokens: maxTokensOf(batch, 0)}
		setParams(&req.Temperature, &req.TopP, &req.Stop, &req.Seed, &r.Params)
		body = streamCompletionRequest{completionRequest: req, Stream: true, StreamOptions: opts}
	default:
		return batcher.Response{}, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "cannot stream " + batch.Op.String()}
	}
	b.st.calls.Add(1)
	// A rich chat answer is checked whole once streamed, as an unstreamed
	// one is (richChoice): its tool calls, and its text against a JSON
	// response format.
	check := batch.Op == batcher.OpChat && r.Rich()
	resp, rl, err := b.stream(ctx, path, body, w, check)
	if err == nil && check {
		o := resp.ChatOutput()
		ch := batcher.Choice{Text: resp.Text, Refusal: o.Refusal, ToolCalls: o.ToolCalls, FinishReason: resp.FinishReason}
		if cerr := b.checkAnswer(&ch, r); cerr != nil {
			err = invalidResponse(http.StatusOK, b.cfg.endpointPath(path), cerr.Error(), nil)
		}
	}
	if err != nil {
		b.st.failed.Add(1)
		b.logFailure(ctx, path, batch, 1, err)
		return batcher.Response{}, err
	}
	if rl != nil {
		batch.RateLimit = rl
	}
	return resp, nil
}

// stream makes the streamed call and reads its events to the end; with
// keep, the answer's text and refusal are kept in the Response too.
func (b *Backend) stream(ctx context.Context, path string, body any, w batcher.DeltaWriter, keep bool) (batcher.Response, *batcher.RateLimitInfo, error) {
	ep := b.cfg.endpointPath(path)
	raw, err := json.Marshal(body)
	if err != nil {
		return batcher.Response{}, nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be encoded as JSON", Err: err}
	}
	raw = withExtra(raw, body) // the request's extra body fields, as do sends them
	// The configured timeout bounds the wait for the headers; the answer
	// then streams for as long as the request's deadline allows.
	// One pooled timer bounds the headers, then the drain after [DONE].
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := b.timers.Start(cancel, b.cfg.Timeout, context.DeadlineExceeded)
	defer timer.Release()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, b.cfg.endpoint(path), bytes.NewReader(raw))
	if err != nil {
		return batcher.Response{}, nil, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "request cannot be built", Err: err}
	}
	if b.streamHdr != nil {
		req.Header = b.streamHdr.Clone() // two allocations, not one a header
	} else {
		b.setStreamHeaders(req.Header)
	}
	res, err := b.client.Do(req)
	timer.Stop()
	if err != nil {
		return batcher.Response{}, nil, transportError(ctx, ep, upstream.HeadersErr(ctx, cctx, err))
	}
	defer func() { _ = res.Body.Close() }()
	rl := ParseRateLimit(res.Header, time.Now())
	if rl != nil && b.cfg.OnRateLimit != nil {
		b.cfg.OnRateLimit(*rl)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		data, err := b.readBody(ctx, ep, res)
		if err != nil {
			return batcher.Response{}, nil, err
		}
		return batcher.Response{}, nil, b.statusError(res.StatusCode, ep, data, rl)
	}
	out, err := readStream(res.Body, w, keep, func(msg string, cause error) error {
		switch {
		case errors.Is(cause, errInStream):
			// Mid-stream errors are the upstream's failures (OpenAI sends
			// server errors this way once the status is out).
			return &batcher.UpstreamError{Class: batcher.ClassServer, StatusCode: res.StatusCode,
				Message: "the upstream failed mid-stream (" + ep + "): " + b.redact(msg)}
		case errors.Is(cause, errMalformed):
			return invalidResponse(res.StatusCode, ep, msg, cause)
		}
		return transportError(ctx, ep, cause)
	})
	if err != nil {
		if ctx.Err() != nil {
			return batcher.Response{}, nil, transportError(ctx, ep, ctx.Err())
		}
		return batcher.Response{}, nil, err
	}
	upstream.Drain(res.Body, timer, errDrained)
	return out, rl, nil
}

// errDrained ends a call whose response did not end soon after [DONE].
var errDrained = errors.New("openai: the response went on after [DONE]")

// setStreamHeaders sets a streamed call's headers: content type, agent,
// the configured headers, organization, project, key, and Accept.
func (b *Backend) setStreamHeaders(h http.Header) {
	b.setHeaders(h, "application/json")
	h.Set("Accept", "text/event-stream")
}

// setHeaders sets a call's headers: content type (none when ctype is
// empty), agent, the configured headers, organization, project and key.
// Every call to the upstream, streamed, unary or of the batch API, sets
// them here.
func (b *Backend) setHeaders(h http.Header, ctype string) {
	if ctype != "" {
		h.Set("Content-Type", ctype)
	}
	h.Set("User-Agent", "batcher")
	for k, v := range b.cfg.Headers {
		h.Set(k, v)
	}
	if b.cfg.Organization != "" {
		h.Set("OpenAI-Organization", b.cfg.Organization)
	}
	if b.cfg.Project != "" {
		h.Set("OpenAI-Project", b.cfg.Project)
	}
	if b.cfg.apiKey != "" {
		if http.CanonicalHeaderKey(b.cfg.APIKeyHeader) == "Authorization" {
			h.Set("Authorization", "Bearer "+b.cfg.apiKey)
		} else {
			h.Set(b.cfg.APIKeyHeader, b.cfg.apiKey)
		}
	}
}

// errMalformed marks a stream that is not what the protocol says;
// errInStream an error event the upstream sent in the stream.
var (
	errMalformed = errors.New("malformed stream")
	errInStream  = errors.New("error in the stream")
)

// readStream reads a streamed answer's server-sent events from body,
// writes each chunk's pieces (of choice 0) to w, and returns how the
// answer ended, with its tool calls assembled from their pieces (and its
// text and refusal when keep is set). fail builds the error of a broken
// stream: msg says what is wrong; cause is errMalformed for a stream that breaks the protocol,
// errInStream for an error event (msg is the upstream's message), the
// read error otherwise. A stream must end with "data: [DONE]": one that
// ends before it was cut.
func readStream(body io.Reader, w batcher.DeltaWriter, keep bool, fail func(msg string, cause error) error) (batcher.Response, error) {
	rs := streamReaders.Get().(*streamRead)
	rs.br.Reset(body)
	defer rs.put() // nothing returned points into its buffers
	br, d, cr, ch := rs.br, &rs.d, &rs.cr, &rs.ch
	var long []byte // a line longer than br's buffer, joined (reused)
	var out batcher.Response
	data := rs.data[:0] // the event's data lines so far
	defer func() { rs.data = data }()
	inEvent := false // data holds an event's data
	var text, refusal strings.Builder
	var calls toolCalls
	for {
		line, err := readLine(br, &long)
		if err != nil {
			return out, lineError(err, fail)
		}
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if len(data)+len(value) > maxEventBytes {
					return out, fail(fmt.Sprintf("event over %d bytes", maxEventBytes), errMalformed)
				}
				if inEvent {
					data = append(data, '\n')
				}
				data = append(data, value...)
				inEvent = len(data) > 0 // an event of empty data lines is none
			}
			continue // comments (":"), event, id and retry fields say nothing here
		}
		if !inEvent {
			continue
		}
		if string(data) == "[DONE]" {
			var refused string
			if keep {
				out.Text, refused = text.String(), refusal.String()
			}
			out.Chat = batcher.NewChatOutput(calls.done(), refused, nil, nil)
			return out, nil
		}
		if err := cr.decode(data, ch); err != nil {
			return out, fail("malformed chunk in the stream", fmt.Errorf("%w: %w", errMalformed, err))
		}
		data, inEvent = data[:0], false // the buffer serves the next event
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			msg := upstreamMessage(append(append([]byte(`{"error":`), ch.Error...), '}'), "")
			return out, fail(msg, errInStream)
		}
		if ch.Usage != nil {
			out.Usage = clampUsage(usageOf(ch.Usage))
		}
		for k := range ch.Choices {
			c := &ch.Choices[k]
			if c.Index != 0 {
				continue // one choice is asked for
			}
			*d = batcher.Delta{}
			switch {
			case c.Delta.Content != nil:
				d.Text = *c.Delta.Content
			case c.Text != nil:
				d.Text = *c.Text
			}
			if c.Delta.Refusal != nil {
				d.Refusal = *c.Delta.Refusal
			}
			for _, t := range c.Delta.ToolCalls {
				tc := batcher.ToolCallDelta{Index: t.Index, ID: t.ID, Name: t.Function.Name, Arguments: t.Function.Arguments}
				if err := calls.add(&tc); err != nil {
					return out, fail(err.Error(), errMalformed)
				}
				d.ToolCalls = append(d.ToolCalls, tc)
			}
			if keep {
				text.WriteString(d.Text)
				refusal.WriteString(d.Refusal)
			}
			if err := w.WriteDelta(d); err != nil {
				return out, err
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				out.FinishReason = finishReason(*c.FinishReason)
				switch {
				case d.Refusal != "" || *c.FinishReason == "content_filter":
					out.FinishReason = batcher.FinishContentFilter
				case *c.FinishReason == "tool_calls":
					out.FinishReason = batcher.FinishToolCalls
				}
			}
		}
	}
}

// lineError is readStream's error for err, readLine's: an event over the
// bound is malformed, an end before [DONE] a cut stream.
func lineError(err error, fail func(msg string, cause error) error) error {
	switch {
	case errors.Is(err, errMalformed):
		return fail(fmt.Sprintf("event over %d bytes", maxEventBytes), errMalformed)
	case errors.Is(err, io.EOF):
		return fail("stream ended before [DONE]", io.ErrUnexpectedEOF)
	}
	return fail("stream read failed", err)
}

// toolCalls assembles a streamed answer's tool calls from their pieces.
type toolCalls struct {
	calls []batcher.ToolCall
	args  [][]byte // each call's arguments so far
}

// add adds a piece: one with the next index begins a call (OpenAI numbers
// them from 0, in order), one with a known index adds to its call's
// arguments, and either sets the call's id and name when it carries them.
func (tc *toolCalls) add(t *batcher.ToolCallDelta) error {
	i := int(t.Index)
	if i == len(tc.calls) && i < batcher.MaxToolCalls {
		tc.calls = append(tc.calls, batcher.ToolCall{})
		tc.args = append(tc.args, nil)
	}
	if i < 0 || i >= len(tc.calls) {
		return fmt.Errorf("tool call index %d out of place (%d calls so far, at most %d)", t.Index, len(tc.calls), batcher.MaxToolCalls)
	}
	c := &tc.calls[i]
	if t.ID != "" {
		c.ID = t.ID
	}
	if t.Name != "" {
		c.Name = t.Name
	}
	tc.args[i] = append(tc.args[i], t.Arguments...)
	return nil
}

// done returns the calls (nil for none).
func (tc *toolCalls) done() []batcher.ToolCall {
	for i := range tc.calls {
		tc.calls[i].Arguments = string(tc.args[i])
	}
	return tc.calls
}

// streamReadBuffer is the size of the buffer a streamed answer is read
// through: a chunk of a token is a few hundred bytes, and an open stream
// holds its buffer for as long as the answer lasts (longer lines are read
// in pieces and joined in readLine's scratch).
const streamReadBuffer = 1024

// streamRead is what readStream reads a stream with: its read buffer, an
// event's data, the chunk it decodes each event into, and the delta it
// writes. Each would be an allocation of every streamed call.
type streamRead struct {
	br   *bufio.Reader
	data []byte
	d    batcher.Delta
	cr   chunkReader
	ch   streamChunk
}

// maxPooledData bounds the event buffer a pooled streamRead keeps: one
// event of more (a long tool call's arguments) is left to the collector.
const maxPooledData = 4 << 10

// put gives rs back to streamReaders, holding nothing of its stream.
func (rs *streamRead) put() {
	rs.br.Reset(nil)
	if cap(rs.data) > maxPooledData {
		rs.data = nil
	}
	rs.data = rs.data[:0]
	rs.d, rs.cr, rs.ch = batcher.Delta{}, chunkReader{}, streamChunk{}
	streamReaders.Put(rs)
}

// streamReaders holds the readers of ended streams, for the next ones: a
// chat's read buffer was its largest allocation of the backend's own.
var streamReaders = sync.Pool{New: func() any { return &streamRead{br: bufio.NewReaderSize(nil, streamReadBuffer)} }}

// readLine reads one line without its end ("\n", "\r\n"), at most
// maxEventBytes long. A line longer than br's buffer is joined in *long,
// which is reused from line to line.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	frag, isPrefix, err := br.ReadLine()
	if err != nil {
		return nil, err
	}
	if !isPrefix {
		return frag, nil
	}
	line := append((*long)[:0], frag...)
	for isPrefix {
		frag, isPrefix, err = br.ReadLine()
		if err != nil {
			return nil, err
		}
		if len(line)+len(frag) > maxEventBytes {
			return nil, errMalformed
		}
		line = append(line, frag...)
	}
	*long = line
	return line, nil
}
