package anthropic

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

type collect struct{ ds []batcher.Delta }

func (c *collect) WriteDelta(d *batcher.Delta) error {
	x := *d
	x.ToolCalls = append([]batcher.ToolCallDelta(nil), d.ToolCalls...)
	c.ds = append(c.ds, x)
	return nil
}

func failf(msg string, cause error) error { return fmt.Errorf("%s: %w", msg, cause) }

// anthropicStream is a real stream's shape (Anthropic's documentation's
// tool-use example), CRLF line ends and a comment included.
const anthropicStream = "event: message_start\r\n" +
	`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2,"cache_read_input_tokens":8}}}` + "\r\n\r\n" +
	": a comment\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let me check"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"Paris\"}"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":1}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_02","name":"get_time","input":{}}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":2}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

func TestReadStream(t *testing.T) {
	var w collect
	out, err := readStream(strings.NewReader(anthropicStream), &w, failf)
	if err != nil {
		t.Fatal(err)
	}
	if out.FinishReason != batcher.FinishToolCalls || out.Usage != (batcher.Usage{PromptTokens: 480, CompletionTokens: 89}) {
		t.Errorf("ended %v %+v", out.FinishReason, out.Usage)
	}
	var text string
	args := map[int32]string{}
	names := map[int32]string{}
	for _, d := range w.ds {
		text += d.Text
		for _, c := range d.ToolCalls {
			args[c.Index] += c.Arguments
			names[c.Index] += c.Name
		}
	}
	if text != "Okay, let me check" || args[0] != `{"location": "Paris"}` || names[0] != "get_weather" || args[1] != "{}" || names[1] != "get_time" {
		t.Errorf("text %q, calls %q %q", text, names, args)
	}
}

func TestReadStreamFailures(t *testing.T) {
	start := "event: message_start\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":1}}}` + "\n\n"
	for _, tc := range []struct {
		name, body string
		cause      error
		msg        string
	}{
		{"cut", start, io.ErrUnexpectedEOF, "stream ended before message_stop"},
		{"error event", start + "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n", errInStream, "Overloaded"},
		{"not JSON", start + "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"bro\n\n", errMalformed, "malformed event"},
		{"delta before start", start + `data: {"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}` + "\n\n", errMalformed, "content_block_delta of a block not started"},
		{"no message_start", `data: {"type":"content_block_start","index":0,"content_block":{"type":"text"}}` + "\n\n", errMalformed, "before message_start"},
		{"stop without reason", start + `data: {"type":"message_stop"}` + "\n\n", errMalformed, "without a stop_reason"},
		{"huge event", start + "data: " + strings.Repeat("x", maxEventBytes+1) + "\n\n", errMalformed, "event over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readStream(strings.NewReader(tc.body), &collect{}, failf)
			if !errors.Is(err, tc.cause) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v, want %v with %q", err, tc.cause, tc.msg)
			}
		})
	}
}
