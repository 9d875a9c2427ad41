package jobs

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

// storedBeforeRichParams is a chat item's request as jobs stored it before
// the rich parameters moved behind batcher.Params.Rich: the params flat,
// under their Go names.
const storedBeforeRichParams = `{"model":"chat","input":{"Op":1,"Messages":[{"Role":"user","Content":"hi","Parts":null,"Name":"","ToolCalls":null,"ToolCallID":""}],"Prompt":"","Text":""},` +
	`"params":{"MaxTokens":64,"Temperature":0.5,"TopP":0.9,"Stop":["\n"],"Seed":7,"PresencePenalty":0.5,` +
	`"FrequencyPenalty":-1,"N":3,"LogitBias":{"7":5},"Logprobs":true,"TopLogprobs":2,"ReasoningEffort":"low"},` +
	`"url":"/v1/chat/completions","user":"u1"}`

// TestItemStoredBeforeRichParamsLoads: a job stored before the move runs
// with every parameter it was given (run_request.go decodes the row this way), and
// a round trip through the store's encoding keeps them.
func TestItemStoredBeforeRichParamsLoads(t *testing.T) {
	f32, i32, i64 := func(v float32) *float32 { return &v }, func(v int32) *int32 { return &v }, func(v int64) *int64 { return &v }
	want := batcher.Params{MaxTokens: 64, Temperature: f32(0.5), TopP: f32(0.9), Stop: []string{"\n"}, Seed: i64(7),
		Rich: &batcher.RichParams{PresencePenalty: f32(0.5), FrequencyPenalty: f32(-1), N: 3, LogitBias: map[string]float32{"7": 5},
			Logprobs: true, TopLogprobs: i32(2), ReasoningEffort: "low"}}
	var ir ItemRequest
	if err := json.Unmarshal([]byte(storedBeforeRichParams), &ir); err != nil {
		t.Fatal(err)
	}
	req := ir.coreRequest("chat")
	if !reflect.DeepEqual(req.Params, want) {
		t.Fatalf("params %+v (rich %+v), want %+v (rich %+v)", req.Params, req.Params.Rich, want, want.Rich)
	}
	if req.Input.Op != batcher.OpChat || len(req.Input.Messages) != 1 || req.ChatOptions().User != "u1" || !req.Rich() {
		t.Fatalf("request %+v", req)
	}

	var again ItemRequest
	if err := json.Unmarshal(encode(&ir), &again); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, ir) {
		t.Fatalf("round trip: %+v, want %+v", again, ir)
	}
	if string(encode(&ir)) != storedBeforeRichParams {
		t.Errorf("stored now as\n%s\nbefore as\n%s", encode(&ir), storedBeforeRichParams)
	}
}
