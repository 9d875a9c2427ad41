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
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	headers := time.AfterFunc(b.cfg.Timeout, func() { cancel(context.DeadlineExceeded) })
	req, err := b.newHTTPRequest(cctx, body)
	if err != nil {
		headers.Stop()
		return batcher.Response{}, nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	res, err := b.client.Do(req)
	headers.Stop()
	if err != nil {
		ectx := ctx
		if ctx.Err() == nil && errors.Is(context.Cause(cctx), context.DeadlineExceeded) {
			ectx = cctx
		}
		return batcher.Response{}, nil, transportError(ectx, ep, err)
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
	return out, rl, nil
}

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
	br := bufio.NewReaderSize(body, 4096)
	var out batcher.Response
	var data []byte
	var usage wireUsage
	blocks := map[int]*streamBlock{}
	var calls int32
	started, stopped := false, false
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, errMalformed) {
				return out, fail(fmt.Sprintf("event over %d bytes", maxEventBytes), errMalformed)
			}
			if errors.Is(err, io.EOF) {
				return out, fail("stream ended before message_stop", io.ErrUnexpectedEOF)
			}
			return out, fail("stream read failed", err)
		}
		if len(line) > 0 {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if len(data)+len(value) > maxEventBytes {
					return out, fail(fmt.Sprintf("event over %d bytes", maxEventBytes), errMalformed)
				}
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
			continue // comments, event, id and retry fields: the data says it all
		}
		if data == nil {
			continue
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return out, fail("malformed event in the stream", fmt.Errorf("%w: %w", errMalformed, err))
		}
		data = nil
		if ev.Type != "message_start" && ev.Type != "ping" && ev.Type != "error" && !started {
			return out, fail(fmt.Sprintf("%s before message_start", clip(ev.Type, 32)), errMalformed)
		}
		var d batcher.Delta
		switch ev.Type {
		case "ping":
		case "error":
			msg := "error event"
			if ev.Error != nil {
				if msg = clean(ev.Error.Message); msg == "" {
					msg = clean(ev.Error.Type)
				}
			}
			return out, fail(msg, errInStream)
		case "message_start":
			started = true
			if ev.Message != nil && ev.Message.Usage != nil {
				usage = *ev.Message.Usage
			}
		case "content_block_start":
			if ev.Index == nil || ev.ContentBlock == nil || blocks[*ev.Index] != nil {
				return out, fail("content_block_start without a new index and a block", errMalformed)
			}
			blk := &streamBlock{}
			blocks[*ev.Index] = blk
			switch ev.ContentBlock.Type {
			case "text":
				d.Text = ev.ContentBlock.Text
			case "tool_use":
				blk.tool, blk.call = true, calls
				calls++
				d.ToolCalls = []batcher.ToolCallDelta{{Index: blk.call, ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}}
			}
		case "content_block_delta":
			if ev.Index == nil || ev.Delta == nil || blocks[*ev.Index] == nil {
				return out, fail("content_block_delta of a block not started", errMalformed)
			}
			blk := blocks[*ev.Index]
			switch ev.Delta.Type {
			case "text_delta":
				d.Text = ev.Delta.Text
			case "input_json_delta":
				if !blk.tool {
					return out, fail("input_json_delta in a block that is no tool_use", errMalformed)
				}
				if ev.Delta.PartialJSON != "" {
					blk.input = true
					d.ToolCalls = []batcher.ToolCallDelta{{Index: blk.call, Arguments: ev.Delta.PartialJSON}}
				}
			}
		case "content_block_stop":
			if ev.Index == nil || blocks[*ev.Index] == nil {
				return out, fail("content_block_stop of a block not started", errMalformed)
			}
			if blk := blocks[*ev.Index]; blk.tool && !blk.input {
				// A call without arguments: {} as in an unstreamed answer.
				d.ToolCalls = []batcher.ToolCallDelta{{Index: blk.call, Arguments: "{}"}}
			}
		case "message_delta":
			if ev.Delta != nil && ev.Delta.StopReason != "" {
				out.FinishReason = finishReason(ev.Delta.StopReason)
				stopped = true
			}
			if u := ev.Usage; u != nil {
				if u.OutputTokens != nil {
					usage.OutputTokens = *u.OutputTokens
				}
				if u.InputTokens != nil {
					usage.InputTokens = *u.InputTokens
				}
			}
		case "message_stop":
			if !stopped {
				return out, fail("message_stop without a stop_reason", errMalformed)
			}
			out.Usage = usageOf(&usage)
			return out, nil
		}
		if d.Text != "" || len(d.ToolCalls) > 0 {
			if err := w.WriteDelta(&d); err != nil {
				return out, err
			}
		}
	}
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
