package jobs_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// An item's chat surface beyond text reaches the core unchanged and its
// answer's whole message reaches results.jsonl; what the model's backend
// cannot honour is an error line naming the field, at creation.
func TestItemsCarryToolCalls(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	tool := &jobs.ItemRequest{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "weather?"}}},
		Tools:      []batcher.Tool{{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}},
		ToolChoice: batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}}
	gated := *tool
	gated.Model = "gatedchat" // the gate backend declares no features
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	// In this order: the error line below names the gated item's line.
	for _, it := range []struct {
		id  string
		req *jobs.ItemRequest
	}{{"tool", tool}, {"gated", &gated}} {
		if err := c.Add(ctx, it.id, it.req); err != nil {
			t.Fatal(err)
		}
	}
	if _, invalid := c.Items(); invalid != 1 {
		t.Fatalf("%d invalid items, want the gated one", invalid)
	}
	j, err := c.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, j.ID)
	dir := jobs.JobDir(e.dir, j.ID)
	raw, err := os.ReadFile(filepath.Join(dir, jobs.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		CustomID string `json:"custom_id"`
		Response struct {
			Body struct {
				Choices []struct {
					Message struct {
						Content   *string `json:"content"`
						ToolCalls []struct {
							Type     string `json:"type"`
							Function struct{ Name, Arguments string }
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			} `json:"body"`
		} `json:"response"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var args struct{ City *string }
	if ch := l.Response.Body.Choices; l.CustomID != "tool" || len(ch) != 1 || ch[0].FinishReason != "tool_calls" || ch[0].Message.Content != nil ||
		len(ch[0].Message.ToolCalls) != 1 || ch[0].Message.ToolCalls[0].Function.Name != "get_weather" ||
		json.Unmarshal([]byte(ch[0].Message.ToolCalls[0].Function.Arguments), &args) != nil || args.City == nil {
		t.Fatalf("results.jsonl lacks the tool call:\n%s", raw)
	}
	errs := readLines(t, filepath.Join(dir, jobs.ErrorsFile))
	want := `line 2: model "gatedchat": request.tools: not supported by this model's backend`
	if len(errs) != 1 || errs[0].CustomID != "gated" || errs[0].Error == nil || errs[0].Error.Code != jobs.CodeInvalidRequest || errs[0].Error.Message != want {
		raw, _ := os.ReadFile(filepath.Join(dir, jobs.ErrorsFile))
		t.Fatalf("errors.jsonl:\n%s\nwant one line for gated with %q", raw, want)
	}

	// With fail_on_invalid the whole job is refused, naming the line, its
	// custom_id and the field.
	c, err = e.m.Begin(ctx, jobs.Spec{Model: "chat", FailOnInvalid: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	err = c.Add(ctx, "gated", &gated)
	if want := `line 1 (custom_id "gated"): model "gatedchat": request.tools: not supported`; !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("fail_on_invalid: %v, want %q", err, want)
	}
}

// A task stored before items carried the chat surface loads with it unset,
// and a result stored before records held tool calls loads as text.
func TestStoredBeforeTheChatSurface(t *testing.T) {
	var ir jobs.ItemRequest
	old := `{"model":"chat","input":{"Op":1,"Messages":[{"Role":"user","Content":"hi"}]},"params":{"MaxTokens":5,"Temperature":null,"TopP":null,"Stop":null,"Seed":null}}`
	if err := json.Unmarshal([]byte(old), &ir); err != nil {
		t.Fatal(err)
	}
	if ir.Model != "chat" || ir.Input.Messages[0].Content != "hi" || ir.Params.MaxTokens != 5 || ir.Tools != nil ||
		ir.ToolChoice != (batcher.ToolChoice{}) || ir.ResponseFormat.Type != batcher.FormatDefault || ir.Extra != nil {
		t.Fatalf("old request loads as %+v", ir)
	}
	rec, err := jobs.DecodeRecord([]byte(`{"text":"hello","finish_reason":1,"prompt_tokens":3,"completion_tokens":2}`))
	if err != nil || rec.Text != "hello" || rec.ToolCalls != nil || rec.Choices != nil {
		t.Fatalf("old record loads as %+v, %v", rec, err)
	}
}
