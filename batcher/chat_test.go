package batcher

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// featured is a fakeBackend that declares features.
type featured struct {
	*fakeBackend
	f Features
}

func (f featured) Features(string, string, Operation) Features { return f.f }

func toolReq(id string) *Request {
	return &Request{ID: id, Route: "c", Input: Input{Op: OpChat, Messages: []Message{{Role: "user", Content: "weather in Paris?"}}}}
}

var weatherTool = Tool{Name: "get_weather", Description: "Weather by city", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}

func TestRichValidation(t *testing.T) {
	rc, err := resolveRoute(Route{Name: "c", Op: OpChat, Backend: "be"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		have  Features
		edit  func(r *Request)
		field string
		why   string
	}{
		{"tools unsupported", 0, func(r *Request) { r.MutableChat().Tools = []Tool{weatherTool} }, "tools", "not supported"},
		{"tool_choice unsupported", 0, func(r *Request) { r.MutableChat().ToolChoice.Mode = ToolChoiceNone }, "tool_choice", "not supported"},
		{"parallel without tools, backend without tools", 0, func(r *Request) { r.MutableChat().ParallelToolCalls = ptr(true) }, "parallel_tool_calls", "needs tools"},
		{"json_object unsupported", FeatureTools, func(r *Request) { r.MutableChat().ResponseFormat.Type = FormatJSONObject }, "response_format", "not supported"},
		{"json_schema unsupported", FeatureJSONObject, func(r *Request) {
			r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONSchema, Name: "s", Schema: []byte(`{}`)}
		}, "response_format", "not supported"},
		{"image unsupported", AllFeatures &^ FeatureImages, func(r *Request) {
			r.Input.Messages[0] = Message{Role: "user", Parts: []ContentPart{{Kind: PartText, Text: "what is it?"}, {Kind: PartImage, ImageURL: "https://x/cat.png"}}}
		}, "input.chat.messages[0].parts[1].image", "not supported"},
		{"n unsupported", AllFeatures &^ FeatureN, func(r *Request) { r.Params.MutableRich().N = 2 }, "params.n", "not supported"},
		{"logprobs unsupported", 0, func(r *Request) { r.Params.MutableRich().Logprobs = true }, "params.logprobs", "not supported"},
		{"penalty unsupported", 0, func(r *Request) { r.Params.MutableRich().PresencePenalty = ptr[float32](1) }, "params.presence_penalty", "not supported"},
		{"logit_bias unsupported", 0, func(r *Request) { r.Params.MutableRich().LogitBias = map[string]float32{"50256": -100} }, "params.logit_bias", "not supported"},
		{"reasoning unsupported", 0, func(r *Request) { r.Params.MutableRich().ReasoningEffort = "low" }, "params.reasoning_effort", "not supported"},
		{"user unsupported", 0, func(r *Request) { r.MutableChat().User = "u1" }, "user", "not supported"},
		{"extra unsupported", 0, func(r *Request) { r.MutableChat().Extra = []byte(`{"top_k":5}`) }, "extra_body.top_k", "not supported"},
		{"name unsupported", 0, func(r *Request) { r.Input.Messages[0].Name = "ann" }, "input.chat.messages[0].name", "not supported"},
		{"tool message unsupported", 0, func(r *Request) {
			r.Input.Messages = append(r.Input.Messages, Message{Role: "tool", ToolCallID: "call_1", Content: "sunny"})
		}, "input.chat.messages[1].tool_call_id", "not supported"},

		{"tool name", AllFeatures, func(r *Request) { r.MutableChat().Tools = []Tool{{Name: "get weather"}} }, "tools[0].name", "a-z"},
		{"tool name twice", AllFeatures, func(r *Request) { r.MutableChat().Tools = []Tool{weatherTool, weatherTool} }, "tools[1].name", "tools[0] too"},
		{"tool parameters", AllFeatures, func(r *Request) { r.MutableChat().Tools = []Tool{{Name: "f", Parameters: []byte(`[1]`)}} }, "tools[0].parameters", "JSON object"},
		{"tool_choice names no tool", AllFeatures, func(r *Request) {
			r.MutableChat().Tools = []Tool{weatherTool}
			r.MutableChat().ToolChoice = ToolChoice{Mode: ToolChoiceFunction, Function: "nope"}
		}, "tool_choice.function", "not the name"},
		{"required without tools", AllFeatures, func(r *Request) { r.MutableChat().ToolChoice.Mode = ToolChoiceRequired }, "tool_choice", "needs tools"},
		{"auto without tools", AllFeatures, func(r *Request) { r.MutableChat().ToolChoice.Mode = ToolChoiceAuto }, "tool_choice", "auto needs tools"},
		{"function without tools", AllFeatures, func(r *Request) {
			r.MutableChat().ToolChoice = ToolChoice{Mode: ToolChoiceFunction, Function: "get_weather"}
		}, "tool_choice", `function "get_weather" needs tools`},
		{"parallel_tool_calls without tools", AllFeatures, func(r *Request) { r.MutableChat().ParallelToolCalls = ptr(false) }, "parallel_tool_calls", "needs tools"},
		{"schema missing", AllFeatures, func(r *Request) { r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONSchema, Name: "s"} }, "response_format.schema", "must be set"},
		{"schema name", AllFeatures, func(r *Request) {
			r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONSchema, Schema: []byte(`{}`)}
		}, "response_format.name", "1 to 64"},
		{"schema on json_object", AllFeatures, func(r *Request) {
			r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONObject, Schema: []byte(`{}`)}
		}, "response_format", "json_schema only"},
		{"parts and content", AllFeatures, func(r *Request) { r.Input.Messages[0].Parts = []ContentPart{{Kind: PartText, Text: "x"}} }, "input.chat.messages[0].content", "empty when parts"},
		{"image url scheme", AllFeatures, func(r *Request) {
			r.Input.Messages[0] = Message{Role: "user", Parts: []ContentPart{{Kind: PartImage, ImageURL: "file:///etc/passwd"}}}
		}, "input.chat.messages[0].parts[0].image.url", "http(s)"},
		{"tool message without its call", AllFeatures, func(r *Request) {
			r.Input.Messages = append(r.Input.Messages, Message{Role: "tool", Content: "sunny"})
		}, "input.chat.messages[1].tool_call_id", "required for role tool"},
		{"tool calls on a user", AllFeatures, func(r *Request) {
			r.Input.Messages[0].ToolCalls = []ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}
		}, "input.chat.messages[0].tool_calls", "only assistant"},
		{"n", AllFeatures, func(r *Request) { r.Params.MutableRich().N = 9 }, "params.n", "1 to 8"},
		{"penalty range", AllFeatures, func(r *Request) { r.Params.MutableRich().FrequencyPenalty = ptr[float32](3) }, "params.frequency_penalty", "-2 to 2"},
		{"top_logprobs alone", AllFeatures, func(r *Request) { r.Params.MutableRich().TopLogprobs = ptr[int32](2) }, "params.top_logprobs", "needs logprobs to be true"},
		{"logit_bias key", AllFeatures, func(r *Request) { r.Params.MutableRich().LogitBias = map[string]float32{"hello": 1} }, "params.logit_bias", "token ids"},
		{"reasoning value", AllFeatures, func(r *Request) { r.Params.MutableRich().ReasoningEffort = "max" }, "params.reasoning_effort", "must be"},
		{"extra reserved", AllFeatures, func(r *Request) { r.MutableChat().Extra = []byte(`{"model":"x"}`) }, "extra_body.model", "sets itself"},
		{"extra not an object", AllFeatures, func(r *Request) { r.MutableChat().Extra = []byte(`[1]`) }, "extra_body", "JSON object"},
		{"extra too big", AllFeatures, func(r *Request) {
			r.MutableChat().Extra = []byte(`{"x":"` + strings.Repeat("a", MaxExtraBodyBytes) + `"}`)
		}, "extra_body", "at most 16384 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := toolReq("x")
			tt.edit(r)
			rc.features = tt.have
			ve := validate(r, &rc)
			if ve == nil || ve.Field != tt.field || !strings.Contains(ve.Reason, tt.why) {
				t.Fatalf("validate = %v, want field %q and %q", ve, tt.field, tt.why)
			}
		})
	}

	// Everything at once is valid where every feature is honoured.
	rc.features = AllFeatures
	r := richReq("ok")
	if ve := validate(r, &rc); ve != nil {
		t.Fatalf("a full rich request: %v", ve)
	}
	// Tools on a completion route name the operation.
	rcc, _ := resolveRoute(Route{Name: "m", Op: OpCompletion, Backend: "be"})
	rcc.features = AllFeatures
	r = req("x", PriorityNormal)
	r.MutableChat().Tools = []Tool{weatherTool}
	if ve := validate(r, &rcc); ve == nil || ve.Field != "tools" || !strings.Contains(ve.Reason, "only chat routes") {
		t.Fatalf("tools on a completion route: %v", ve)
	}
}

// richReq sets every rich field.
func richReq(id string) *Request {
	r := toolReq(id)
	r.Input.Messages = []Message{
		{Role: "system", Content: "be brief", Name: "sys"},
		{Role: "user", Parts: []ContentPart{{Kind: PartText, Text: "what is it?"}, {Kind: PartImage, ImageURL: "data:image/png;base64,AAAA", Detail: "low"}}},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"temp":21}`},
	}
	r.MutableChat().Tools = []Tool{weatherTool}
	r.MutableChat().ToolChoice = ToolChoice{Mode: ToolChoiceFunction, Function: "get_weather"}
	r.MutableChat().ParallelToolCalls = ptr(false)
	r.Params = Params{Rich: &RichParams{PresencePenalty: ptr[float32](0.5), FrequencyPenalty: ptr[float32](-0.5), N: 2,
		LogitBias: map[string]float32{"42": 5}, Logprobs: true, TopLogprobs: ptr[int32](3), ReasoningEffort: "low"}}
	r.MutableChat().User = "u1"
	r.MutableChat().Extra = []byte(`{"top_k":5}`)
	return r
}

// TestFeaturesOfEveryTarget: a route honours what all its targets honour,
// so that a request never falls back to a backend that would drop part of
// it; and a backend that declares nothing takes plain text only.
func TestFeaturesOfEveryTarget(t *testing.T) {
	full := featured{&fakeBackend{}, AllFeatures}
	b, err := New(
		WithBackend(BackendConfig{Name: "full", Backend: full, MaxConcurrency: 1}),
		WithBackend(BackendConfig{Name: "plain", Backend: &fakeBackend{}, MaxConcurrency: 1}),
		WithRoute(Route{Name: "c", Op: OpChat, Backend: "full"}),
		WithRoute(Route{Name: "fb", Op: OpChat, Backend: "full", Fallbacks: []Target{{Backend: "plain"}}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	r := toolReq("a")
	r.MutableChat().Tools = []Tool{weatherTool}
	c, err := b.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("tools on a backend that takes them: %v", err)
	}
	<-c.Done()
	r = toolReq("b")
	r.Route = "fb"
	r.MutableChat().Tools = []Tool{weatherTool}
	_, err = b.Submit(context.Background(), r)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "tools" || ve.Reason != "not supported by this model's fallback backend (its route's fallbacks[0])" {
		t.Fatalf("tools on a route with a plain fallback: %v, want a refusal naming tools and the fallback", err)
	}
	r = toolReq("c")
	r.Route = "fb"
	if c, err = b.Submit(context.Background(), r); err != nil {
		t.Fatalf("plain text on that route: %v", err)
	}
	<-c.Done()
}

// TestUnsupportedNamesTheFallback: a field the route's own backend takes
// but a fallback cannot is refused naming that fallback, by Submit and by
// Validate (a batch job's door) alike; one the route's own backend
// cannot take keeps the plain refusal.
func TestUnsupportedNamesTheFallback(t *testing.T) {
	b, err := New(
		WithBackend(BackendConfig{Name: "full", Backend: featured{&fakeBackend{}, AllFeatures}, MaxConcurrency: 1}),
		WithBackend(BackendConfig{Name: "tools-only", Backend: featured{&fakeBackend{}, FeatureTools | FeatureSeed}, MaxConcurrency: 1}),
		WithBackend(BackendConfig{Name: "no-extra", Backend: featured{&fakeBackend{}, AllFeatures &^ FeatureExtraBody}, MaxConcurrency: 1}),
		WithRoute(Route{Name: "two", Op: OpChat, Backend: "full", Fallbacks: []Target{{Backend: "no-extra"}}}),
		WithRoute(Route{Name: "own", Op: OpChat, Backend: "tools-only", Fallbacks: []Target{{Backend: "no-extra"}}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	routes := map[string]RouteInfo{}
	for _, ri := range b.Routes() {
		routes[ri.Name] = ri
	}
	for _, tc := range []struct {
		name, route, field, reason string
		set                        func(*Request)
	}{
		{"extra body, fallback", "two", "extra_body.top_k", "not supported by this model's fallback backend (its route's fallbacks[0])",
			func(r *Request) { r.MutableChat().Extra = []byte(`{"top_k":5}`) }},
		{"extra body, own backend", "own", "extra_body.top_k", "not supported by this model's backend",
			func(r *Request) { r.MutableChat().Extra = []byte(`{"top_k":5}`) }},
		{"user, own backend", "own", "user", "not supported by this model's backend",
			func(r *Request) { r.MutableChat().User = "u1" }},
	} {
		r := toolReq("x")
		r.Route = tc.route
		tc.set(r)
		_, err := b.Submit(context.Background(), r)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field || ve.Reason != tc.reason {
			t.Errorf("%s: Submit: %v; want %s: %s", tc.name, err, tc.field, tc.reason)
		}
		err = Validate(r, routes[tc.route])
		if !errors.As(err, &ve) || ve.Field != tc.field || ve.Reason != tc.reason {
			t.Errorf("%s: Validate: %v; want %s: %s", tc.name, err, tc.field, tc.reason)
		}
	}
}

// TestRichAnswerReachesResult: a backend's tool calls, refusal, logprobs
// and choices reach the Result, and a tool-call answer without text is
// an answer, not a failure.
func TestRichAnswerReachesResult(t *testing.T) {
	fb := &fakeBackend{}
	fb.fail = func(b *Batch, out []Response) error {
		for i := range out {
			out[i] = Response{Chat: &ChatOutput{ToolCalls: []ToolCall{{ID: "call_" + b.Requests[i].ID, Name: "get_weather", Arguments: `{"city":"Paris"}`}}, Logprobs: &Logprobs{Content: []TokenLogprob{{Token: "x", Logprob: -0.1}}}, Choices: []Choice{{FinishReason: FinishToolCalls}, {Text: "hi", FinishReason: FinishStop}}}, FinishReason: FinishToolCalls}
		}
		return nil
	}
	b := newTest(t, featured{fb, AllFeatures}, 1, BatchConfig{}, WithRoute(Route{Name: "c", Op: OpChat, Backend: "be"}))
	r := toolReq("a")
	r.MutableChat().Tools = []Tool{weatherTool}
	c := submit(t, b, r)
	<-c.Done()
	res := c.Result()
	if res.Err != nil || len(res.ChatOutput().ToolCalls) != 1 || res.ChatOutput().ToolCalls[0].ID != "call_a" || res.FinishReason != FinishToolCalls ||
		res.ChatOutput().Logprobs == nil || len(res.ChatOutput().Choices) != 2 || res.ChatOutput().Choices[1].Text != "hi" {
		t.Fatalf("result = %+v", res)
	}
}

// TestRichKeys: requests that differ only in what shapes the answer
// (tools, tool choice, response format and its schema, parameters, user,
// extra fields) never share a lane where the backend shares ParamRich, and
// those that differ also in message parts, names and tool calls never
// share an Identity (a deduplicated or cached answer); a plain request's
// lane key holds nothing rich.
func TestRichKeys(t *testing.T) {
	rc, _ := resolveRoute(Route{Name: "c", Op: OpChat, Backend: "be"})
	rc.targets = []target{{be: &backendState{}, shared: AllParams}}
	base := richReq("x")
	edits := map[string]func(r *Request){
		"tool params": func(r *Request) {
			r.MutableChat().Tools = []Tool{{Name: "get_weather", Parameters: []byte(`{"type":"object"}`)}}
		},
		"tool strict": func(r *Request) { r.MutableChat().Tools = []Tool{weatherTool}; r.ChatOptions().Tools[0].Strict = true },
		"tool choice": func(r *Request) { r.MutableChat().ToolChoice = ToolChoice{Mode: ToolChoiceAuto} },
		"parallel":    func(r *Request) { r.MutableChat().ParallelToolCalls = ptr(true) },
		"no parallel": func(r *Request) { r.MutableChat().ParallelToolCalls = nil },
		"format":      func(r *Request) { r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONObject} },
		"schema": func(r *Request) {
			r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONSchema, Name: "s", Schema: []byte(`{"type":"object"}`)}
		},
		"schema strict": func(r *Request) {
			r.MutableChat().ResponseFormat = ResponseFormat{Type: FormatJSONSchema, Name: "s", Schema: []byte(`{}`), Strict: true}
		},
		"penalty":        func(r *Request) { r.Params.MutableRich().PresencePenalty = ptr[float32](0.6) },
		"n":              func(r *Request) { r.Params.MutableRich().N = 3 },
		"logit bias":     func(r *Request) { r.Params.MutableRich().LogitBias = map[string]float32{"42": 6} },
		"top logprobs":   func(r *Request) { r.Params.MutableRich().TopLogprobs = nil },
		"reasoning":      func(r *Request) { r.Params.MutableRich().ReasoningEffort = "high" },
		"user":           func(r *Request) { r.MutableChat().User = "u2" },
		"extra":          func(r *Request) { r.MutableChat().Extra = []byte(`{"top_k":6}`) },
		"image":          func(r *Request) { r.Input.Messages[1].Parts[1].ImageURL = "data:image/png;base64,BBBB" },
		"image detail":   func(r *Request) { r.Input.Messages[1].Parts[1].Detail = "high" },
		"name":           func(r *Request) { r.Input.Messages[0].Name = "other" },
		"tool call args": func(r *Request) { r.Input.Messages[2].ToolCalls[0].Arguments = `{"city":"Rome"}` },
		"tool call id":   func(r *Request) { r.Input.Messages[3].ToolCallID = "call_2" },
	}
	bk := dedupKey{lane: keyOf(base, &rc, 0), id: identity(base, &rc)}
	for name, edit := range edits {
		r := richReq("y")
		edit(r)
		if keyOf(r, &rc, 0) == bk.lane && name != "image" && name != "image detail" && name != "name" &&
			name != "tool call args" && name != "tool call id" {
			t.Errorf("%s: same lane key as the base request", name)
		}
		if identity(r, &rc) == bk.id {
			t.Errorf("%s: same Identity (dedup and cache key) as the base request", name)
		}
	}
	if again := richReq("z"); keyOf(again, &rc, 0) != bk.lane || identity(again, &rc) != bk.id {
		t.Fatal("equal requests got different keys")
	}
	// A fan-out target does not share ParamRich: one lane for all.
	rc.targets[0].shared = 0
	r := richReq("y")
	r.MutableChat().Tools = nil
	r.MutableChat().ToolChoice = ToolChoice{}
	if keyOf(r, &rc, 0) != keyOf(base, &rc, 0) {
		t.Fatal("a fan-out target split lanes on rich fields")
	}
	// A plain request's lane key holds nothing rich.
	rc.targets[0].shared = AllParams
	if k := keyOf(toolReq("p"), &rc, 0); k.rich != "" {
		t.Fatalf("plain request's rich key = %q", k.rich)
	}
}

// TestDedupKeepsRichApart: two requests in flight together that differ
// only in their tools each get their own upstream call.
func TestDedupKeepsRichApart(t *testing.T) {
	fb := &fakeBackend{hold: make(chan struct{})}
	b := newTest(t, featured{fb, AllFeatures}, 4, BatchConfig{MaxBatchSize: 1},
		WithRoute(Route{Name: "c", Op: OpChat, Backend: "be", Batch: BatchConfig{MaxBatchSize: 1}}))
	a, c := toolReq("a"), toolReq("b")
	a.Dedup, c.Dedup = DedupOn, DedupOn
	a.MutableChat().Tools = []Tool{weatherTool}
	c.MutableChat().Tools = []Tool{{Name: "get_time"}}
	ca, cc := submit(t, b, a), submit(t, b, c)
	close(fb.hold)
	<-ca.Done()
	<-cc.Done()
	if ca.Result().Deduplicated || cc.Result().Deduplicated || fb.calls.Load() != 2 {
		t.Fatalf("deduplicated %v %v, calls %d: requests with different tools shared an answer",
			ca.Result().Deduplicated, cc.Result().Deduplicated, fb.calls.Load())
	}
}

// TestEstimateCountsEveryChoice: a request for n choices may generate
// max_tokens for each, and a provider bills them all (the sim's usage
// counts every choice), so its estimate counts them all: admission checks
// the estimate against a tenant's tpm quota, and an estimate of one
// choice would admit a request n times past it (the overuse is charged
// only once the reply reports it).
func TestEstimateCountsEveryChoice(t *testing.T) {
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: featured{&fakeBackend{}, AllFeatures}, MaxConcurrency: 1}),
		WithRoute(Route{Name: "c", Op: OpChat, Backend: "be"}),
	)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	if err := b.SetTenants([]TenantPolicy{{Name: "a", Quotas: TenantQuotas{TPM: 250}}}); err != nil {
		t.Fatal(err)
	}
	one, three := toolReq("one"), toolReq("three")
	for _, r := range []*Request{one, three} {
		r.Tenant = "a"
		r.Params.MaxTokens = 100
	}
	three.Params.MutableRich().N = 3
	if d := three.EstimatedTokens(0) - one.EstimatedTokens(0); d != 200 {
		t.Errorf("three choices of 100 tokens estimate %d more than one, want 200", d)
	}
	_, err = b.Submit(context.Background(), three)
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Quota != QuotaTPM || qe.Need < 300 {
		t.Fatalf("three choices of up to 100 tokens under a tpm quota of 250: %v, want refused as needing 300 or more", err)
	}
}

// TestEstimateCountsRich: tool definitions and schemas count, and an
// image counts as image tokens, not as its data URL's bytes.
func TestEstimateCountsRich(t *testing.T) {
	rc, _ := resolveRoute(Route{Name: "c", Op: OpChat, Backend: "be"})
	plain := toolReq("p")
	withTools := toolReq("t")
	withTools.MutableChat().Tools = []Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{` + strings.Repeat(`"a":{},`, 200) + `"b":{}}}`)}}
	if d := estimateTokens(withTools, &rc) - estimateTokens(plain, &rc); d < 300 {
		t.Fatalf("tools add %d tokens, want their schema's ~350", d)
	}
	img := toolReq("i")
	img.Input.Messages[0] = Message{Role: "user", Parts: []ContentPart{{Kind: PartImage, ImageURL: "data:image/png;base64," + strings.Repeat("A", 400000)}}}
	got := estimateTokens(img, &rc) - int(rc.DefaultMaxTokens)
	if got < highImageTokens || got > highImageTokens+100 {
		t.Fatalf("a 400 kB data URL image estimates %d prompt tokens, want about %d", got, highImageTokens)
	}
}
