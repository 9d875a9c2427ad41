package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// newChat builds a Batcher with the sim behind chat route "c".
func newChat(t *testing.T) *batcher.Batcher {
	t.Helper()
	b, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: newProvider(t, sim.Config{})}),
		batcher.WithRoute(batcher.Route{Name: "c", Op: batcher.OpChat, Backend: "sim"}),
		batcher.WithRoute(batcher.Route{Name: "p", Op: batcher.OpCompletion, Backend: "sim"}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	return b
}

var weather = batcher.Tool{Name: "get_weather", Description: "Current weather of a city", Parameters: []byte(
	`{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]},"unit":{"type":"string","enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","unit","days"],"additionalProperties":false}`)}

func do(t *testing.T, b *batcher.Batcher, r *batcher.Request) batcher.Result {
	t.Helper()
	res, err := b.Do(context.Background(), r)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return res
}

// TestToolCallRoundTrip: a user message naming a tool gets a call of it
// whose arguments validate against its parameters; the tool's answer sent
// back gets a text answer.
func TestToolCallRoundTrip(t *testing.T) {
	b := newChat(t)
	msgs := []batcher.Message{{Role: "user", Content: "use get_weather for Paris"}}
	res := do(t, b, &batcher.Request{Route: "c", Input: batcher.Input{Op: batcher.OpChat, Messages: msgs}, Chat: &batcher.ChatOptions{Tools: []batcher.Tool{weather}}})
	if res.FinishReason != batcher.FinishToolCalls || len(res.ChatOutput().ToolCalls) != 1 || res.ChatOutput().ToolCalls[0].Name != "get_weather" || res.Text != "" {
		t.Fatalf("first turn = %+v", res)
	}
	call := res.ChatOutput().ToolCalls[0]
	validates(t, weather.Parameters, call.Arguments)
	msgs = append(msgs, batcher.Message{Role: "assistant", ToolCalls: res.ChatOutput().ToolCalls},
		batcher.Message{Role: "tool", ToolCallID: call.ID, Content: `{"temp":21}`})
	res = do(t, b, &batcher.Request{Route: "c", Input: batcher.Input{Op: batcher.OpChat, Messages: msgs}, Chat: &batcher.ChatOptions{Tools: []batcher.Tool{weather}}})
	if res.FinishReason != batcher.FinishStop || res.ChatOutput().ToolCalls != nil || res.Text == "" {
		t.Fatalf("second turn = %+v", res)
	}

	// tool_choice naming a function calls it whatever the message says;
	// none never calls.
	other := batcher.Tool{Name: "get_time"}
	r := &batcher.Request{Route: "c", Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "hello"}}},
		Chat: &batcher.ChatOptions{Tools: []batcher.Tool{weather, other}, ToolChoice: batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_time"}}}
	if res = do(t, b, r); len(res.ChatOutput().ToolCalls) != 1 || res.ChatOutput().ToolCalls[0].Name != "get_time" || res.ChatOutput().ToolCalls[0].Arguments != "{}" {
		t.Fatalf("tool_choice get_time = %+v", res)
	}
	r.MutableChat().ToolChoice = batcher.ToolChoice{Mode: batcher.ToolChoiceNone}
	r.Input.Messages[0].Content = "use get_weather"
	if res = do(t, b, r); res.ChatOutput().ToolCalls != nil || res.Text == "" {
		t.Fatalf("tool_choice none = %+v", res)
	}
}

func validates(t *testing.T, schema []byte, instance string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(instance))
	if err != nil {
		t.Fatalf("not JSON: %q: %v", instance, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%s does not validate: %v", instance, err)
	}
}

func TestStructuredOutputs(t *testing.T) {
	b := newChat(t)
	in := batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "describe a cat"}}}
	res := do(t, b, &batcher.Request{Route: "c", Input: in, Chat: &batcher.ChatOptions{ResponseFormat: batcher.ResponseFormat{Type: batcher.FormatJSONObject}}})
	var obj map[string]any
	if err := json.Unmarshal([]byte(res.Text), &obj); err != nil {
		t.Fatalf("json_object answer %q: %v", res.Text, err)
	}
	schema := []byte(`{"type":"object","properties":{"name":{"type":"string","minLength":3},"legs":{"type":"integer","minimum":0,"maximum":4},` +
		`"tags":{"type":"array","items":{"type":"string"},"minItems":2},"indoor":{"type":"boolean"},"owner":{"type":["string","null"]}},` +
		`"required":["name","legs","tags","indoor","owner"],"additionalProperties":false}`)
	res = do(t, b, &batcher.Request{Route: "c", Input: in,
		Chat: &batcher.ChatOptions{ResponseFormat: batcher.ResponseFormat{Type: batcher.FormatJSONSchema, Name: "cat", Schema: schema, Strict: true}}})
	validates(t, schema, res.Text)

	// A schema that is not one is the upstream's 400, not a crash.
	_, err := b.Do(context.Background(), &batcher.Request{Route: "c", Input: in,
		Chat: &batcher.ChatOptions{ResponseFormat: batcher.ResponseFormat{Type: batcher.FormatJSONSchema, Name: "bad", Schema: []byte(`{"type":5}`)}}})
	if batcher.ClassOf(err) != batcher.ClassInvalidRequest || !strings.Contains(err.Error(), "response_format.schema") {
		t.Fatalf("bad schema: %v", err)
	}
}

func TestChoicesLogprobsAndImages(t *testing.T) {
	b := newChat(t)
	in := batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Parts: []batcher.ContentPart{
		{Kind: batcher.PartText, Text: "what is in this picture"}, {Kind: batcher.PartImage, ImageURL: "data:image/png;base64,iVBORw0KGgo="}}}}}
	res := do(t, b, &batcher.Request{Route: "c", Input: in, Params: batcher.Params{Rich: &batcher.RichParams{N: 3, Logprobs: true, TopLogprobs: ptr[int32](2)}}})
	if len(res.ChatOutput().Choices) != 3 || res.ChatOutput().Choices[0].Text != res.Text || res.ChatOutput().Choices[1].Text == res.ChatOutput().Choices[2].Text && res.ChatOutput().Choices[1].Text == res.Text {
		t.Fatalf("choices = %+v", res.ChatOutput().Choices)
	}
	if !strings.HasPrefix(res.Text, "what is in") {
		t.Fatalf("text = %q: the sim echoes the text parts", res.Text)
	}
	if res.ChatOutput().Logprobs == nil || len(res.ChatOutput().Logprobs.Content) != len(strings.Fields(res.Text)) || len(res.ChatOutput().Logprobs.Content[0].Top) != 2 {
		t.Fatalf("logprobs = %+v", res.ChatOutput().Logprobs)
	}
	other := in
	other.Messages = []batcher.Message{{Role: "user", Parts: []batcher.ContentPart{in.Messages[0].Parts[0], {Kind: batcher.PartImage, ImageURL: "https://example.com/dog.png"}}}}
	if do(t, b, &batcher.Request{Route: "c", Input: other}).Text == do(t, b, &batcher.Request{Route: "c", Input: in}).Text {
		t.Fatal("the image does not shape the answer")
	}
}

// TestChoicesUsage: the usage of a chat with n choices counts the tokens of
// every choice, as a provider bills them; the core charges budgets, quotas
// and jobs' costs what it says.
func TestChoicesUsage(t *testing.T) {
	b := newChat(t)
	in := batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "tell me about queues"}}}
	one := do(t, b, &batcher.Request{Route: "c", Input: in, Params: batcher.Params{Rich: &batcher.RichParams{N: 1, Logprobs: true}}})
	res := do(t, b, &batcher.Request{Route: "c", Input: in, Params: batcher.Params{Rich: &batcher.RichParams{N: 3, Logprobs: true}}})
	choices := res.ChatOutput().Choices
	if len(choices) != 3 {
		t.Fatalf("choices = %+v", choices)
	}
	var words int32
	for _, ch := range choices {
		words += int32(len(strings.Fields(ch.Text)))
	}
	if res.Usage.CompletionTokens != words || res.Usage.CompletionTokens <= one.Usage.CompletionTokens {
		t.Fatalf("usage = %+v for 3 choices of %d words in all; one choice's usage = %+v", res.Usage, words, one.Usage)
	}
	if res.Usage.PromptTokens != one.Usage.PromptTokens {
		t.Fatalf("prompt tokens = %d, want %d: the prompt is sent once", res.Usage.PromptTokens, one.Usage.PromptTokens)
	}
}

// TestSimRefusesWhatItCannotHonour: what the sim could only ignore is
// refused by name, never dropped.
func TestSimRefusesWhatItCannotHonour(t *testing.T) {
	b := newChat(t)
	chatIn := batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "hi"}}}
	for field, r := range map[string]*batcher.Request{
		"params.presence_penalty": {Route: "c", Input: chatIn, Params: batcher.Params{Rich: &batcher.RichParams{PresencePenalty: ptr[float32](1)}}},
		"params.reasoning_effort": {Route: "c", Input: chatIn, Params: batcher.Params{Rich: &batcher.RichParams{ReasoningEffort: "low"}}},
		"extra_body.top_k":        {Route: "c", Input: chatIn, Chat: &batcher.ChatOptions{Extra: []byte(`{"top_k":3}`)}},
		"params.n":                {Route: "p", Input: prompt("hi"), Params: batcher.Params{Rich: &batcher.RichParams{N: 2}}},
		"tools":                   {Route: "p", Input: prompt("hi"), Chat: &batcher.ChatOptions{Tools: []batcher.Tool{weather}}},
	} {
		_, err := b.Do(context.Background(), r)
		var ve *batcher.ValidationError
		if !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}
