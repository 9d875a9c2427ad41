package batcher

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

// TestValidation: Submit refuses each bad request naming the field and
// its limit, and Validate, the rule the doors that hold requests (a job's
// items, a batch file's lines) call when a request arrives, refuses it
// the same way from the route's RouteInfo.
func TestValidation(t *testing.T) {
	b := newTest(t, &fakeBackend{}, 1, BatchConfig{}, WithRoute(Route{Name: "e", Op: OpEmbedding, Backend: "be", MaxInputBytes: 10}))
	routes := map[string]RouteInfo{}
	for _, ri := range b.Routes() {
		routes[ri.Name] = ri
	}
	ok := func() *Request { return req("ok", PriorityNormal) }
	tests := []struct {
		name  string
		edit  func(r *Request)
		field string
		limit string
	}{
		{"missing model", func(r *Request) { r.Route = "" }, "model", "must be set"},
		{"unknown model", func(r *Request) { r.Route = "gpt-9" }, "model", `unknown model "gpt-9"`},
		{"empty input", func(r *Request) { r.Input = Input{Op: OpCompletion} }, "input.completion.prompt", "must not be empty"},
		{"no input", func(r *Request) { r.Input = Input{} }, "input", "must be set"},
		{"wrong shape", func(r *Request) { r.Input = Input{Op: OpEmbedding, Text: "x"} }, "input", "takes completion input, got embedding"},
		{"wrong shape for embeddings", func(r *Request) { r.Route = "e" }, "input", "takes embedding input, got completion"},
		{"prompt too big", func(r *Request) { r.Route = "e"; r.Input = Input{Op: OpEmbedding, Text: strings.Repeat("x", 11)} }, "input", "at most 10 bytes, got 11"},
		{"max_tokens negative", func(r *Request) { r.Params.MaxTokens = -1 }, "params.max_tokens", "1 to 32768"},
		{"max_tokens over", func(r *Request) { r.Params.MaxTokens = 40000 }, "params.max_tokens", "1 to 32768, got 40000"},
		{"temperature", func(r *Request) { r.Params.Temperature = ptr[float32](2.5) }, "params.temperature", "0 to 2, got 2.5"},
		{"temperature NaN", func(r *Request) { r.Params.Temperature = ptr(float32(math.NaN())) }, "params.temperature", "0 to 2"},
		{"top_p", func(r *Request) { r.Params.TopP = ptr[float32](0) }, "params.top_p", "greater than 0"},
		{"stop count", func(r *Request) { r.Params.Stop = []string{"a", "b", "c", "d", "e"} }, "params.stop", "at most 4"},
		{"stop empty", func(r *Request) { r.Params.Stop = []string{""} }, "params.stop[0]", "1 to 64 bytes"},
		{"timeout", func(r *Request) { r.Timeout = -time.Second }, "timeout", "must not be negative"},
		{"priority", func(r *Request) { r.Priority = 9 }, "priority", "unknown"},
		{"id", func(r *Request) { r.ID = strings.Repeat("i", 129) }, "id", "at most 128 bytes"},
		{"metadata", func(r *Request) { r.Metadata = map[string]string{"k": strings.Repeat("v", 513)} }, "metadata[k]", "at most 512 bytes"},
		{"n", func(r *Request) { r.Params.MutableRich().N = 9 }, "params.n", "1 to 8, got 9"},
		{"presence_penalty", func(r *Request) { r.Params.MutableRich().PresencePenalty = ptr[float32](3) }, "params.presence_penalty", "-2 to 2, got 3"},
		{"frequency_penalty", func(r *Request) { r.Params.MutableRich().FrequencyPenalty = ptr[float32](-2.5) }, "params.frequency_penalty", "-2 to 2, got -2.5"},
		{"top_logprobs", func(r *Request) { r.Params.MutableRich().TopLogprobs = ptr[int32](21) }, "params.top_logprobs", "0 to 20, got 21"},
		{"logit_bias", func(r *Request) { r.Params.MutableRich().LogitBias = map[string]float32{"7": 101} }, "params.logit_bias[7]", "-100 to 100, got 101"},
		{"max_tokens on embeddings", func(r *Request) { r.Route = "e"; r.Input = Input{Op: OpEmbedding, Text: "x"}; r.Params.MaxTokens = 5 },
			"params.max_tokens", `route "e" serves embeddings, which take no generation parameters`},
		{"temperature on embeddings", func(r *Request) {
			r.Route = "e"
			r.Input = Input{Op: OpEmbedding, Text: "x"}
			r.Params.Temperature = ptr[float32](0.5)
		}, "params.temperature", "take no generation parameters"},
		{"n on embeddings", func(r *Request) {
			r.Route = "e"
			r.Input = Input{Op: OpEmbedding, Text: "x"}
			r.Params.MutableRich().N = 2
		}, "params.n", "take no generation parameters"},
		{"chat on a completion route", func(r *Request) { r.Input = Input{Op: OpChat, Messages: []Message{{Role: "wizard", Content: "x"}}} }, "input", "takes completion input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok()
			tt.edit(r)
			_, err := b.Submit(context.Background(), r)
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Submit = %v, want a validation error", err)
			}
			if ve.Field != tt.field || !strings.Contains(ve.Reason, tt.limit) {
				t.Fatalf("got %q, want field %q and %q", err, tt.field, tt.limit)
			}
			ri, ok := routes[r.Route]
			if !ok {
				return // no route: Submit's refusal only
			}
			err = Validate(r, ri)
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || ve.Field != tt.field || !strings.Contains(ve.Reason, tt.limit) {
				t.Fatalf("Validate = %v, want field %q and %q", err, tt.field, tt.limit)
			}
		})
	}
	if b.Pending() != 0 {
		t.Fatalf("pending %d: an invalid request was admitted", b.Pending())
	}
}

func TestChatValidation(t *testing.T) {
	rc, err := resolveRoute(Route{Name: "c", Op: OpChat, Backend: "be"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		msgs  []Message
		field string
	}{
		{nil, "input.chat.messages"},
		{[]Message{{Role: "user"}}, "input.chat.messages"},
		{[]Message{{Role: "user", Content: "hi"}, {Role: "wizard", Content: "x"}}, "input.chat.messages[1].role"},
	} {
		r := &Request{Route: "c", Input: Input{Op: OpChat, Messages: tt.msgs}}
		if ve := validate(r, &rc); ve == nil || ve.Field != tt.field {
			t.Errorf("messages %v: got %v, want field %s", tt.msgs, ve, tt.field)
		}
	}
}

func FuzzValidate(f *testing.F) {
	f.Add("id", uint8(2), uint8(1), "hello", int32(10), float32(0.5), float32(1), "stop", int64(-1))
	f.Add("", uint8(9), uint8(4), "", int32(-5), float32(-1), float32(0), "", int64(0))
	rc, err := resolveRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", MaxInputBytes: 64})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string, prio, op uint8, text string, maxTokens int32, temp, topP float32, stop string, timeout int64) {
		r := &Request{
			ID:       id,
			Route:    "m",
			Priority: Priority(prio),
			Input:    Input{Op: Operation(op), Prompt: text, Text: text, Messages: []Message{{Role: text, Content: text}}},
			Params:   Params{MaxTokens: maxTokens, Temperature: &temp, TopP: &topP, Stop: []string{stop}},
			Timeout:  time.Duration(timeout),
		}
		ve := validate(r, &rc)
		if ve == nil {
			// What passes must be within every limit.
			if r.Input.Size() > 64 || maxTokens < 0 || temp < 0 || temp > 2 || topP <= 0 || topP > 1 || len(id) > MaxIDBytes || r.Input.Op != OpCompletion {
				t.Fatalf("accepted an out-of-range request: %+v", r)
			}
			return
		}
		if ve.Field == "" || ve.Reason == "" || !errors.Is(ve, ErrInvalid) {
			t.Fatalf("validation error without field or reason: %#v", ve)
		}
	})
}
