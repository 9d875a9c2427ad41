package openai

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

type collect struct{ ds []batcher.Delta }

func (c *collect) WriteDelta(d *batcher.Delta) error {
	c.ds = append(c.ds, *d)
	return nil
}

func failAs(msg string, cause error) error { return errors.Join(errors.New(msg), cause) }

// TestReadStreamToolCalls: tool-call fragments pass through with their
// index, id and name, and assemble into the answer's calls; usage and the
// finish reason (tool_calls) come from the last chunks; multi-line data
// and comments are read as SSE says.
func TestReadStreamToolCalls(t *testing.T) {
	body := ": keep-alive\n\n" +
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":""}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}` + "\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\n" + `data: "function":{"arguments":"1}"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}` + "\n\n" +
		"data: [DONE]\n\n"
	var c collect
	out, err := readStream(strings.NewReader(body), &c, true, failAs)
	if err != nil {
		t.Fatal(err)
	}
	var args strings.Builder
	for _, d := range c.ds {
		for _, tc := range d.ToolCalls {
			args.WriteString(tc.Arguments)
		}
	}
	if first := c.ds[0].ToolCalls; len(first) != 1 || first[0].ID != "call_1" || first[0].Name != "get" {
		t.Fatalf("first delta %+v", c.ds[0])
	}
	if args.String() != `{"a":1}` || out.FinishReason != batcher.FinishToolCalls || out.Usage.CompletionTokens != 7 {
		t.Fatalf("arguments %q, end %+v", args.String(), out)
	}
	if want := []batcher.ToolCall{{ID: "call_1", Name: "get", Arguments: `{"a":1}`}}; !slices.Equal(out.ChatOutput().ToolCalls, want) {
		t.Fatalf("assembled calls %+v, want %+v", out.ChatOutput().ToolCalls, want)
	}
	if _, err := readStream(strings.NewReader(`data: {"choices":[]}`+"\n\n"), &c, false, failAs); err == nil {
		t.Fatal("a stream without [DONE] read as whole")
	}
}

// TestReadStreamParallelToolCalls: pieces of two calls, interleaved,
// assemble by index; a piece whose index skips ahead is a malformed
// stream.
func TestReadStreamParallelToolCalls(t *testing.T) {
	piece := func(i int, id, name, args string) string {
		return fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%q,"function":{"name":%q,"arguments":%q}}]}}]}`+"\n\n", i, id, name, args)
	}
	body := piece(0, "c0", "a", "") + piece(1, "c1", "b", `{"y"`) + piece(0, "", "", `{"x":`) + piece(1, "", "", `:2}`) +
		piece(0, "", "", `1}`) + `data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	var c collect
	out, err := readStream(strings.NewReader(body), &c, false, failAs)
	want := []batcher.ToolCall{{ID: "c0", Name: "a", Arguments: `{"x":1}`}, {ID: "c1", Name: "b", Arguments: `{"y":2}`}}
	if err != nil || !slices.Equal(out.ChatOutput().ToolCalls, want) || out.FinishReason != batcher.FinishToolCalls {
		t.Fatalf("calls %+v (%v), err %v; want %+v", out.ChatOutput().ToolCalls, out.FinishReason, err, want)
	}
	_, err = readStream(strings.NewReader(piece(0, "c0", "a", "")+piece(2, "c2", "b", "")+"data: [DONE]\n\n"), &c, false, failAs)
	if !errors.Is(err, errMalformed) {
		t.Fatalf("index 2 after 0: err %v, want a malformed stream", err)
	}
}

// TestReadStreamLongLines: lines longer than the read buffer, one after
// another and split across data lines, are read whole; an event over
// maxEventBytes is a malformed stream.
func TestReadStreamLongLines(t *testing.T) {
	a, b := strings.Repeat("a", 3*streamReadBuffer+7), strings.Repeat("b", streamReadBuffer)
	chunk := func(s string) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
	}
	body := chunk(a) + chunk("x") + chunk(b) + "data: {\"choices\":[{\"index\":0,\n" + `data: "delta":{"content":"` + a + `"}}]}` + "\n\ndata: [DONE]\n\n"
	var c collect
	out, err := readStream(strings.NewReader(body), &c, true, failAs)
	if want := a + "x" + b + a; err != nil || out.Text != want || len(c.ds) != 4 || c.ds[0].Text != a || c.ds[2].Text != b {
		t.Fatalf("text of %d bytes in %d deltas, err %v; want %d bytes in 4", len(out.Text), len(c.ds), err, len(want))
	}
	huge := "data: " + strings.Repeat("z", maxEventBytes+1) + "\n\n"
	if _, err := readStream(strings.NewReader(huge), &c, false, failAs); !errors.Is(err, errMalformed) {
		t.Fatalf("an event over %d bytes: err %v, want a malformed stream", maxEventBytes, err)
	}
}

// FuzzReadStream: any body ends in an answer or an error, never a panic,
// and an answer means the stream said [DONE].
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":-1}}\r\n\r\ndata: [DONE]\r\n\r\n")
	f.Add("data: {\"error\":{\"message\":\"overloaded\"}}\n\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"bro\n\n")
	f.Add("event: x\nid: 1\nretry: 5\n:comment\n\n")
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
	f.Fuzz(func(t *testing.T, body string) {
		var c collect
		out, err := readStream(strings.NewReader(body), &c, true, failAs)
		if err == nil && !strings.Contains(body, "[DONE]") {
			t.Fatalf("answer %+v without [DONE]", out)
		}
		if len(out.ChatOutput().ToolCalls) > batcher.MaxToolCalls {
			t.Fatalf("%d tool calls", len(out.ChatOutput().ToolCalls))
		}
		if err == nil {
			var text strings.Builder
			for _, d := range c.ds {
				text.WriteString(d.Text)
			}
			if text.String() != out.Text {
				t.Fatalf("kept text %q, deltas %q", out.Text, text.String())
			}
		}
		if out.Usage.PromptTokens < 0 || out.Usage.CompletionTokens < 0 {
			t.Fatalf("negative usage %+v", out.Usage)
		}
	})
}
