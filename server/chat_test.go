package server

import (
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// richChatReq sets every field of the chat surface beyond text.
func richChatReq(id string) *batcherv1.Request {
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}})
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "required": []any{"answer"}})
	extra, _ := structpb.NewStruct(map[string]any{"top_k": 5, "safe_mode": true})
	r := chatReq(id, "")
	r.GetChat().Messages = []*batcherv1.ChatMessage{
		{Role: "user", Name: "ann", Parts: []*batcherv1.ContentPart{
			{Part: &batcherv1.ContentPart_Text{Text: "what is it?"}},
			{Part: &batcherv1.ContentPart_Image{Image: &batcherv1.ImagePart{Url: "data:image/png;base64,AAAA", Detail: "low"}}},
		}},
		{Role: "assistant", ToolCalls: []*batcherv1.ToolCall{{Id: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", ToolCallId: "call_1", Content: `{"temp":21}`},
	}
	r.Tools = []*batcherv1.Tool{{Name: "get_weather", Description: "Weather", Parameters: params, Strict: true}}
	r.ToolChoice = &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Function{Function: "get_weather"}}
	r.ParallelToolCalls = proto.Bool(false)
	r.ResponseFormat = &batcherv1.ResponseFormat{Type: batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "out", Schema: schema, Strict: true}
	r.ExtraBody = extra
	r.User = "u1"
	r.Params = &batcherv1.GenerationParams{PresencePenalty: proto.Float32(0.5), FrequencyPenalty: proto.Float32(-1), N: proto.Int32(2),
		LogitBias: map[string]float32{"42": -100}, Logprobs: true, TopLogprobs: proto.Int32(3), ReasoningEffort: "low"}
	return r
}

func TestToCoreChatSurface(t *testing.T) {
	var got batcher.Request
	if st := toCore(richChatReq("x"), &got); st != nil {
		t.Fatalf("toCore: %v", st)
	}
	m := got.Input.Messages
	switch {
	case m[0].Name != "ann" || len(m[0].Parts) != 2 || m[0].Parts[0] != (batcher.ContentPart{Kind: batcher.PartText, Text: "what is it?"}) ||
		m[0].Parts[1] != (batcher.ContentPart{Kind: batcher.PartImage, ImageURL: "data:image/png;base64,AAAA", Detail: "low"}):
		t.Fatalf("message 0 = %+v", m[0])
	case len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0] != (batcher.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}):
		t.Fatalf("message 1 = %+v", m[1])
	case m[2].ToolCallID != "call_1" || m[2].Content != `{"temp":21}`:
		t.Fatalf("message 2 = %+v", m[2])
	case len(got.ChatOptions().Tools) != 1 || got.ChatOptions().Tools[0].Name != "get_weather" || !got.ChatOptions().Tools[0].Strict ||
		string(got.ChatOptions().Tools[0].Parameters) != `{"properties":{"city":{"type":"string"}},"type":"object"}`:
		t.Fatalf("tools = %+v (%s)", got.ChatOptions().Tools, got.ChatOptions().Tools[0].Parameters)
	case got.ChatOptions().ToolChoice != (batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}) || got.ChatOptions().ParallelToolCalls == nil || *got.ChatOptions().ParallelToolCalls:
		t.Fatalf("tool choice %+v, parallel %v", got.ChatOptions().ToolChoice, got.ChatOptions().ParallelToolCalls)
	case got.ChatOptions().ResponseFormat.Type != batcher.FormatJSONSchema || got.ChatOptions().ResponseFormat.Name != "out" || !got.ChatOptions().ResponseFormat.Strict ||
		string(got.ChatOptions().ResponseFormat.Schema) != `{"required":["answer"],"type":"object"}`:
		t.Fatalf("response format = %+v", got.ChatOptions().ResponseFormat)
	case string(got.ChatOptions().Extra) != `{"safe_mode":true,"top_k":5}` || got.ChatOptions().User != "u1":
		t.Fatalf("extra %s, user %q", got.ChatOptions().Extra, got.ChatOptions().User)
	}
	p := got.Params.RichParams()
	if *p.PresencePenalty != 0.5 || *p.FrequencyPenalty != -1 || p.N != 2 || p.LogitBias["42"] != -100 || !p.Logprobs || *p.TopLogprobs != 3 || p.ReasoningEffort != "low" {
		t.Fatalf("params = %+v", p)
	}
	if !got.Rich() {
		t.Fatal("Rich() = false")
	}
	var plain batcher.Request
	if st := toCore(chatReq("p", "hi"), &plain); st != nil || plain.Rich() {
		t.Fatalf("a plain request: %v, rich %v", st, plain.Rich())
	}

	// Enum values the wire does not know are refused by name.
	bad := richChatReq("b")
	bad.ToolChoice = &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Mode{Mode: 9}}
	if st := toCore(bad, &got); st == nil || !strings.HasPrefix(st.Message(), "request.tool_choice.mode") {
		t.Fatalf("unknown tool choice mode: %v", st)
	}
	bad = richChatReq("b")
	bad.ResponseFormat.Type = 7
	if st := toCore(bad, &got); st == nil || !strings.HasPrefix(st.Message(), "request.response_format.type") {
		t.Fatalf("unknown format type: %v", st)
	}
	bad = richChatReq("b")
	bad.GetChat().Messages[0].Parts[0] = &batcherv1.ContentPart{}
	if st := toCore(bad, &got); st == nil || !strings.HasPrefix(st.Message(), "request.chat.messages[0].parts[0]") {
		t.Fatalf("empty part: %v", st)
	}
}

// TestSubmitRefusesWhatTheBackendCannotHonour: the test backend declares
// no features, so tools are refused naming the field, never dropped.
func TestSubmitRefusesWhatTheBackendCannotHonour(t *testing.T) {
	e := newEnv(t, newFake())
	for field, r := range map[string]*batcherv1.Request{
		"request.tools": func() *batcherv1.Request { r := chatReq("t", "hi"); r.Tools = richChatReq("").Tools; return r }(),
		"request.response_format": func() *batcherv1.Request {
			r := chatReq("f", "hi")
			r.ResponseFormat = richChatReq("").ResponseFormat
			return r
		}(),
		"request.chat.messages[0].parts[1].image": func() *batcherv1.Request {
			r := chatReq("i", "")
			r.GetChat().Messages[0].Parts = richChatReq("").GetChat().Messages[0].Parts
			return r
		}(),
		"request.extra_body.safe_mode": func() *batcherv1.Request { r := chatReq("e", "hi"); r.ExtraBody = richChatReq("").ExtraBody; return r }(),
		"request.params.n": func() *batcherv1.Request {
			r := chatReq("n", "hi")
			r.Params = &batcherv1.GenerationParams{N: proto.Int32(2)}
			return r
		}(),
	} {
		_, err := e.client.Submit(testCtx(t), &batcherv1.SubmitRequest{Request: r})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), field+":") {
			t.Errorf("%s: got %v %q", field, st.Code(), st.Message())
		}
	}
	if n := e.be.calls.Load(); n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

func TestCompletionCarriesTheMessage(t *testing.T) {
	req := &batcher.Request{ID: "x"}
	plain := completion(req, &batcher.Result{Text: "hi", FinishReason: batcher.FinishStop})
	if plain.Message != nil || plain.GetText() != "hi" {
		t.Fatalf("plain completion = %v", plain)
	}
	res := &batcher.Result{
		Chat: &batcher.ChatOutput{
			ToolCalls: []batcher.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			Logprobs:  &batcher.Logprobs{Content: []batcher.TokenLogprob{{Token: "a", Logprob: -0.5, Bytes: []byte("a"), Top: []batcher.TopLogprob{{Token: "b", Logprob: -1}}}}},
			Choices:   []batcher.Choice{{FinishReason: batcher.FinishToolCalls}, {Text: "second", FinishReason: batcher.FinishStop, Refusal: ""}},
		},
		FinishReason: batcher.FinishToolCalls,
	}
	res.ChatOutput().Choices[0].ToolCalls = res.ChatOutput().ToolCalls
	c := completion(req, res)
	m := c.GetMessage()
	if c.FinishReason != batcherv1.FinishReason_FINISH_REASON_TOOL_CALLS || m.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_TOOL_CALLS ||
		len(m.GetToolCalls()) != 1 || m.GetToolCalls()[0].GetArguments() != `{"city":"Paris"}` ||
		m.GetLogprobs().GetContent()[0].GetTopLogprobs()[0].GetToken() != "b" ||
		len(c.GetChoices()) != 2 || c.GetChoices()[1].GetContent() != "second" {
		t.Fatalf("completion = %v", c)
	}
	refused := completion(req, &batcher.Result{Chat: &batcher.ChatOutput{Refusal: "no"}, FinishReason: batcher.FinishContentFilter})
	if refused.GetMessage().GetRefusal() != "no" {
		t.Fatalf("refusal = %v", refused)
	}
}
