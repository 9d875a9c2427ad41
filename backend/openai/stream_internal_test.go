package openai

import (
	"errors"
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
// index, id and name; usage and the finish reason come from the last
// chunks; multi-line data and comments are read as SSE says.
func TestReadStreamToolCalls(t *testing.T) {
	body := ": keep-alive\n\n" +
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":""}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}` + "\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\n" + `data: "function":{"arguments":"1}"}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}` + "\n\n" +
		"data: [DONE]\n\n"
	var c collect
	out, err := readStream(strings.NewReader(body), &c, failAs)
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
	if args.String() != `{"a":1}` || out.FinishReason != batcher.FinishStop || out.Usage.CompletionTokens != 7 {
		t.Fatalf("arguments %q, end %+v", args.String(), out)
	}
	if _, err := readStream(strings.NewReader(`data: {"choices":[]}`+"\n\n"), &c, failAs); err == nil {
		t.Fatal("a stream without [DONE] read as whole")
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
	f.Fuzz(func(t *testing.T, body string) {
		var c collect
		out, err := readStream(strings.NewReader(body), &c, failAs)
		if err == nil && !strings.Contains(body, "[DONE]") {
			t.Fatalf("answer %+v without [DONE]", out)
		}
		if out.Usage.PromptTokens < 0 || out.Usage.CompletionTokens < 0 {
			t.Fatalf("negative usage %+v", out.Usage)
		}
	})
}
