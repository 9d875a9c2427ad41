package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/upstream"
)

// maxEventBytes bounds one server-sent event of a streamed answer.
const maxEventBytes = 1 << 20

// streamEvent is one event of a streamed Messages answer. Its type is the
// data's "type" (Anthropic repeats it in the event: line).
type streamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *wireUsage `json:"usage"`
	} `json:"message"`
	Index        *int `json:"index"`
	ContentBlock *struct {
		Type string `json:"type"`
		Text string `json:"text"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *struct {
		InputTokens  *int64 `json:"input_tokens"`
		OutputTokens *int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// Stream implements batcher.Streamer: the batch's one request as a
// streamed Messages call, each text and tool-input piece written to w as
// it arrives. The call's Timeout bounds the wait for the response's
// headers only; the request's deadline bounds the whole answer. Once ctx
// ends the connection is closed at once.
func (b *Backend) Stream(ctx context.Context, batch *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	if len(batch.Requests) != 1 {
		return batcher.Response{}, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "a streamed batch holds one request",
			Err: fmt.Errorf("anthropic: %d requests", len(batch.Requests))}
	}
	if batch.Op != batcher.OpChat {
		return batcher.Response{}, &batcher.UpstreamError{Class: batcher.ClassInvalidRequest,
			Message: "the Anthropic Messages API serves chat only, not " + batch.Op.String()}
	}
	req, err := b.request(batch, 0)
	if err != nil {
		return batcher.Response{}, err
	}
	req.Stream = true
	b.calls.Add(1)
	start := time.Now()
	resp, rl, err := b.stream(ctx, req, w)
	batch.UpstreamCall(time.Since(start), err)
	if err != nil {
		b.failed.Add(1)
		b.logFailure(ctx, batch, err)
		return batcher.Response{}, err
	}
	if rl != nil {
		batch.RateLimit = rl
	}
	return resp, nil
}

// stream makes the streamed call and reads its events to the end.
func (b *Backend) stream(ctx context.Context, body *messagesRequest, w batcher.DeltaWriter) (batcher.Response, *batcher.RateLimitInfo, error) {
	ep := b.cfg.endpointPath(messagesPath)
	// One pooled timer bounds the headers, then the drain after
	// message_stop.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := b.timers.Start(cancel, b.cfg.Timeout, context.DeadlineExceeded)
	defer timer.Release()
	req, err := b.newHTTPRequest(cctx, body)
	if err != nil {
		return batcher.Response{}, nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
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
	out, err := readStream(res.Body, w, func(msg string, cause error) error {
		switch {
		case errors.Is(cause, errInStream):
			// Anthropic reports overloads and server failures this way
			// once the status is out.
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

// errDrained ends a call whose response did not end soon after
// message_stop.
var errDrained = errors.New("anthropic: the response went on after message_stop")

// errMalformed marks a stream that is not what the protocol says;
// errInStream an error event the upstream sent in the stream.
var (
	errMalformed = errors.New("malformed stream")
	errInStream  = errors.New("error in the stream")
)

// streamBlock is what the reader knows of one content block.
type streamBlock struct {
	tool  bool  // a tool_use block
	call  int32 // its position among the answer's tool calls
	input bool  // some input was streamed
}

// readStream reads a streamed Messages answer's server-sent events from
// body, writes each text and tool-input piece to w, and returns how the
// answer ended (stop reason and usage). fail builds the error of a broken
// stream: msg says what is wrong; cause is errMalformed for a stream that
// breaks the protocol, errInStream for an error event (msg is the
// upstream's message), the read error otherwise. A stream must end with
// message_stop: one that ends before it was cut.
func readStream(body io.Reader, w batcher.DeltaWriter, fail func(msg string, cause error) error) (batcher.Response, error) {
	sr := sseReader{br: bufio.NewReaderSize(body, 4096)}
	st := streamAcc{blocks: map[int]*streamBlock{}}
	for {
		data, err := sr.next()
		if err != nil {
			if errors.Is(err, errMalformed) {
				return st.out, fail(fmt.Sprintf("event over %d bytes", maxEventBytes), errMalformed)
			}
			if errors.Is(err, io.EOF) {
				return st.out, fail("stream ended before message_stop", io.ErrUnexpectedEOF)
			}
			return st.out, fail("stream read failed", err)
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return st.out, fail("malformed event in the stream", fmt.Errorf("%w: %w", errMalformed, err))
		}
		d, done, msg, cause := st.apply(&ev)
		switch {
		case cause != nil:
			return st.out, fail(msg, cause)
		case done:
			return st.out, nil
		case d.Text != "" || len(d.ToolCalls) > 0:
			if err := w.WriteDelta(&d); err != nil {
				return st.out, err
			}
		}
	}
}

// sseReader reads server-sent events.
type sseReader struct {
	br   *bufio.Reader
	data []byte
}

// next returns the data of the next event that has some; the error is
// the read's, or errMalformed for an event over maxEventBytes.
func (r *sseReader) next() ([]byte, error) {
	r.data = nil
	for {
		line, err := readLine(r.br)
		if err != nil {
			return nil, err
		}
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if len(r.data)+len(value) > maxEventBytes {
					return nil, errMalformed
				}
				if r.data != nil {
					r.data = append(r.data, '\n')
				}
				r.data = append(r.data, value...)
			}
			continue // comments, event, id and retry fields: the data says it all
		}
		if r.data != nil {
			return r.data, nil
		}
	}
}

// streamAcc is a streamed answer read so far.
type streamAcc struct {
	out              batcher.Response
	usage            wireUsage
	blocks           map[int]*streamBlock
	calls            int32
	started, stopped bool
}

// apply takes in one event and returns the delta it brings; done at
// message_stop; a non-nil cause (with msg) for an event that breaks the
// stream, as readStream's fail takes them.
func (st *streamAcc) apply(ev *streamEvent) (d batcher.Delta, done bool, msg string, cause error) {
	if ev.Type != "message_start" && ev.Type != "ping" && ev.Type != "error" && !st.started {
		return d, false, fmt.Sprintf("%s before message_start", clip(ev.Type, 32)), errMalformed
	}
	switch ev.Type {
	case "error":
		msg := "error event"
		if ev.Error != nil {
			if msg = clean(ev.Error.Message); msg == "" {
				msg = clean(ev.Error.Type)
			}
		}
		return d, false, msg, errInStream
	case "message_start":
		st.started = true
		if ev.Message != nil && ev.Message.Usage != nil {
			st.usage = *ev.Message.Usage
		}
	case "content_block_start", "content_block_delta", "content_block_stop":
		msg, cause = st.block(ev, &d)
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			st.out.FinishReason = finishReason(ev.Delta.StopReason)
			st.stopped = true
		}
		if u := ev.Usage; u != nil {
			if u.OutputTokens != nil {
				st.usage.OutputTokens = *u.OutputTokens
			}
			if u.InputTokens != nil {
				st.usage.InputTokens = *u.InputTokens
			}
		}
	case "message_stop":
		if !st.stopped {
			return d, false, "message_stop without a stop_reason", errMalformed
		}
		st.out.Usage = usageOf(&st.usage)
		return d, true, "", nil
	}
	return d, false, msg, cause
}

// block takes in a content block's event, setting d to the piece it
// brings.
func (st *streamAcc) block(ev *streamEvent, d *batcher.Delta) (msg string, cause error) {
	switch ev.Type {
	case "content_block_start":
		if ev.Index == nil || ev.ContentBlock == nil || st.blocks[*ev.Index] != nil {
			return "content_block_start without a new index and a block", errMalformed
		}
		blk := &streamBlock{}
		st.blocks[*ev.Index] = blk
		switch ev.ContentBlock.Type {
		case "text":
			d.Text = ev.ContentBlock.Text
		case "tool_use":
			blk.tool, blk.call = true, st.calls
			st.calls++
			d.ToolCalls = []batcher.ToolCallDelta{{Index: blk.call, ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}}
		}
	case "content_block_delta":
		if ev.Index == nil || ev.Delta == nil || st.blocks[*ev.Index] == nil {
			return "content_block_delta of a block not started", errMalformed
		}
		blk := st.blocks[*ev.Index]
		switch ev.Delta.Type {
		case "text_delta":
			d.Text = ev.Delta.Text
		case "input_json_delta":
			if !blk.tool {
				return "input_json_delta in a block that is no tool_use", errMalformed
			}
			if ev.Delta.PartialJSON != "" {
				blk.input = true
				d.ToolCalls = []batcher.ToolCallDelta{{Index: blk.call, Arguments: ev.Delta.PartialJSON}}
			}
		}
	case "content_block_stop":
		if ev.Index == nil || st.blocks[*ev.Index] == nil {
			return "content_block_stop of a block not started", errMalformed
		}
		if blk := st.blocks[*ev.Index]; blk.tool && !blk.input {
			// A call without arguments: {} as in an unstreamed answer.
			d.ToolCalls = []batcher.ToolCallDelta{{Index: blk.call, Arguments: "{}"}}
		}
	}
	return "", nil
}

// readLine reads one line without its end ("\n", "\r\n"), at most
// maxEventBytes long.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, isPrefix, err := br.ReadLine()
		if err != nil {
			return nil, err
		}
		if len(line)+len(frag) > maxEventBytes {
			return nil, errMalformed
		}
		if !isPrefix {
			if line == nil {
				return frag, nil
			}
			return append(line, frag...), nil
		}
		line = append(line, frag...)
	}
}
