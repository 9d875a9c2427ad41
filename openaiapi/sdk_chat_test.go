package openaiapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// simEnv is newEnv with the embedded sim behind route "simchat": it
// honours tools, response formats and images.
func simEnv(t *testing.T) *env {
	t.Helper()
	p, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p}),
		batcher.WithRoute(batcher.Route{Name: "simchat", Op: batcher.OpChat, Backend: "sim"}),
	))
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Current weather of a city"),
	Parameters: shared.FunctionParameters{"type": "object", "additionalProperties": false, "required": []string{"city"},
		"properties": map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris"}}}},
	Strict: openai.Bool(true),
})

// TestSDKToolCallRoundTrip drives the front door with openai-go through
// a whole tool call: the assistant's call, the tool's answer, the final
// text.
func TestSDKToolCallRoundTrip(t *testing.T) {
	e := simEnv(t)
	params := openai.ChatCompletionNewParams{
		Model:    "simchat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris? Use get_weather.")},
		Tools:    []openai.ChatCompletionToolUnionParam{weatherTool},
	}
	c, err := e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("first turn: finish %q, message %+v", ch.FinishReason, ch.Message)
	}
	call := ch.Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"Paris"}` || call.ID == "" {
		t.Fatalf("tool call %+v", call)
	}
	params.Messages = append(params.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"temp_c":21}`, call.ID))
	c, err = e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if ch = c.Choices[0]; ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 || ch.Message.Content == "" {
		t.Fatalf("final turn: finish %q, message %+v", ch.FinishReason, ch.Message)
	}

	// A named tool_choice is obeyed whatever the message says.
	params.Messages = params.Messages[:1]
	params.Messages[0] = openai.UserMessage("hello")
	params.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
	if c, err = e.client.Chat.Completions.New(testCtx(t), params); err != nil || len(c.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("tool_choice get_weather: %v %+v", err, c)
	}
}

// TestSDKStrictJSONSchema: the answer validates against the schema.
func TestSDKStrictJSONSchema(t *testing.T) {
	e := simEnv(t)
	schema := map[string]any{"type": "object", "additionalProperties": false, "required": []string{"name", "age", "pets"},
		"properties": map[string]any{
			"name": map[string]any{"type": "string"},
			"age":  map[string]any{"type": "integer", "minimum": 18, "maximum": 99},
			"pets": map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"cat", "dog"}}},
		}}
	c, err := e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model:    "simchat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("describe a person")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: schema, Strict: openai.Bool(true)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name string   `json:"name"`
		Age  int      `json:"age"`
		Pets []string `json:"pets"`
	}
	dec := json.NewDecoder(strings.NewReader(c.Choices[0].Message.Content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil || got.Name == "" || got.Age < 18 || got.Age > 99 || len(got.Pets) == 0 ||
		(got.Pets[0] != "cat" && got.Pets[0] != "dog") {
		t.Fatalf("answer %q: %v", c.Choices[0].Message.Content, err)
	}
}

// TestSDKImagePart: an image part reaches a backend that takes images, and
// is refused by name on one that does not.
func TestSDKImagePart(t *testing.T) {
	e := simEnv(t)
	msg := openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("what is this"),
		openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64,iVBORw0KGgo=", Detail: "low"}),
	})
	c, err := e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{Model: "simchat", Messages: []openai.ChatCompletionMessageParamUnion{msg}})
	if err != nil || !strings.HasPrefix(c.Choices[0].Message.Content, "what is this") {
		t.Fatalf("image on the sim: %v %+v", err, c)
	}
	_, err = e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{msg}})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "messages[0].content[1].image_url" {
		t.Fatalf("image on a text-only backend: %d %q %q", ae.StatusCode, ae.Param, ae.Message)
	}
}

// TestSDKUnsupportedField: a field the backend cannot honour, known
// (presence_penalty) or unknown (sent with the SDK's extra-field option),
// is a 400 naming it, never a 200 that dropped it.
func TestSDKUnsupportedField(t *testing.T) {
	e := simEnv(t)
	params := openai.ChatCompletionNewParams{Model: "simchat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	_, err := e.client.Chat.Completions.New(testCtx(t), params, option.WithJSONSet("top_k", 5))
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "top_k" || !strings.Contains(ae.Message, "not supported") {
		t.Fatalf("unknown field: %d %q %q", ae.StatusCode, ae.Param, ae.Message)
	}
	params.PresencePenalty = openai.Float(0.5)
	_, err = e.client.Chat.Completions.New(testCtx(t), params)
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "presence_penalty" {
		t.Fatalf("presence_penalty: %d %q %q", ae.StatusCode, ae.Param, ae.Message)
	}
	params.PresencePenalty = openai.Float(0)
	params.PresencePenalty = openai.ChatCompletionNewParams{}.PresencePenalty
	params.N = openai.Int(2)
	params.Logprobs = openai.Bool(true)
	c, err := e.client.Chat.Completions.New(testCtx(t), params)
	if err != nil || len(c.Choices) != 2 || c.Choices[1].Index != 1 || len(c.Choices[0].Logprobs.Content) == 0 {
		t.Fatalf("n and logprobs: %v %+v", err, c)
	}
}
