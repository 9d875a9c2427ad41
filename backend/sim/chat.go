package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/schema"
)

// chatFeatures is what the sim honours on a chat route: tools (it calls
// them), JSON and JSON Schema answers (valid ones), images (it accepts them
// and they shape the answer), names, n choices and logprobs. It does not
// declare the penalties, logit_bias, reasoning_effort, user or extra body
// fields: it could only ignore them, so the core refuses them by name.
const chatFeatures = batcher.FeatureTools | batcher.FeatureJSONObject | batcher.FeatureJSONSchema |
	batcher.FeatureImages | batcher.FeatureNames | batcher.FeatureN | batcher.FeatureLogprobs

// Features tells the core what the sim honours (batcher.FeatureDeclarer):
// chatFeatures on chat routes, nothing beyond text elsewhere; a seed on
// every route.
func (p *Provider) Features(_, _ string, op batcher.Operation) batcher.Features {
	if op == batcher.OpChat {
		return chatFeatures | batcher.FeatureSeed
	}
	return batcher.FeatureSeed
}

// answerChat turns the generated completion c of a chat request into its
// answer: a tool call when the request's tools and messages call for one,
// JSON when its response format asks for it, n choices and logprobs when
// asked. It also returns the tokens the choices generated, all of them
// (a provider bills every choice, and the core charges budgets and quotas
// what the usage says), and the longest choice's, which sets the call's
// latency. It returns an *batcher.UpstreamError for a schema that does not
// compile, as a provider answers 400.
func (p *Provider) answerChat(model string, r *batcher.Request, c completion, maxTokens int32, sample uint64) (resp batcher.Response, generated, longest int32, err error) {
	resp = batcher.Response{Text: c.text, FinishReason: c.finish}
	n := max(int(r.Params.RichParams().N), 1)
	choices := make([]batcher.Choice, n)
	for k := range choices {
		ck := c
		if k > 0 {
			ck = generate(model, &r.Input, &r.Params, maxTokens, splitmix64(sample+uint64(k)))
		}
		ch, err := p.choice(r, ck, uint64(k))
		if err != nil {
			return batcher.Response{}, 0, 0, err
		}
		choices[k] = ch
		generated += ck.tokens
		longest = max(longest, ck.tokens)
	}
	ch := &choices[0]
	var all []batcher.Choice
	if n > 1 {
		all = choices
	}
	resp.Text, resp.FinishReason = ch.Text, ch.FinishReason
	resp.Chat = batcher.NewChatOutput(ch.ToolCalls, "", ch.Logprobs, all)
	return resp, generated, longest, nil
}

// choice is one choice's answer.
func (p *Provider) choice(r *batcher.Request, c completion, k uint64) (batcher.Choice, error) {
	ch := batcher.Choice{Text: c.text, FinishReason: c.finish}
	seed := inputHash("choice", &r.Input, &r.Params) ^ splitmix64(k)
	if t := toolToCall(r); t != nil {
		args, err := p.instance(t.Parameters, seed, words(c.text))
		if err != nil {
			return ch, badRequest("tools[%s].parameters: %v", t.Name, err)
		}
		ch.Text, ch.FinishReason = "", batcher.FinishToolCalls
		ch.ToolCalls = []batcher.ToolCall{{ID: "call_" + strconv.FormatUint(seed>>16, 36), Name: t.Name, Arguments: string(args)}}
	} else {
		switch rf := r.ChatOptions().ResponseFormat; rf.Type {
		case batcher.FormatJSONObject:
			b, _ := json.Marshal(map[string]string{"answer": c.text})
			ch.Text, ch.FinishReason = string(b), batcher.FinishStop
		case batcher.FormatJSONSchema:
			b, err := p.instance(rf.Schema, seed, words(c.text))
			if err != nil {
				return ch, badRequest("response_format.schema: %v", err)
			}
			ch.Text, ch.FinishReason = string(b), batcher.FinishStop
		}
	}
	if rp := r.Params.Rich; rp != nil && rp.Logprobs {
		ch.Logprobs = logprobs(ch.Text, seed, rp.TopLogprobs)
	}
	return ch, nil
}

// toolToCall picks the tool a request's answer calls, or nil: the one
// tool_choice names; with tool_choice required, the tool the last user
// message names, else the first; with auto (or unset), the tool the last
// user message names, if any. A conversation whose last message is a tool
// result gets a text answer unless tool_choice names a function.
func toolToCall(r *batcher.Request) *batcher.Tool {
	o := r.ChatOptions()
	tc := &o.ToolChoice
	if len(o.Tools) == 0 || tc.Mode == batcher.ToolChoiceNone {
		return nil
	}
	if tc.Mode == batcher.ToolChoiceFunction {
		for i := range o.Tools {
			if o.Tools[i].Name == tc.Function {
				return &o.Tools[i]
			}
		}
		return nil
	}
	msgs := r.Input.Messages
	last := &msgs[len(msgs)-1]
	if last.Role != "user" {
		return nil
	}
	text := last.Text()
	for i := range o.Tools {
		if strings.Contains(text, o.Tools[i].Name) {
			return &o.Tools[i]
		}
	}
	if tc.Mode == batcher.ToolChoiceRequired {
		return &o.Tools[0]
	}
	return nil
}

func words(s string) []string {
	w := strings.Fields(s)
	if len(w) == 0 {
		return []string{"sim"}
	}
	return w
}

// instance returns a JSON value that validates against schema (a JSON
// object; nil: an empty object), derived from seed and the words of the
// generated text, and checks it against the schema with a JSON Schema
// validator: the sim never answers JSON that its own request's schema
// refuses (unless a fault asks it to).
func (p *Provider) instance(sch []byte, seed uint64, hint []string) ([]byte, error) {
	if sch == nil {
		return []byte("{}"), nil
	}
	out, err := schema.Instance(sch, seed, hint)
	if err != nil {
		return nil, err
	}
	if err := p.schemas.Validate(sch, out); err != nil {
		if errors.Is(err, schema.ErrInvalidSchema) {
			return nil, err
		}
		return nil, fmt.Errorf("the sim cannot generate an instance of this schema: %w", err)
	}
	return out, nil
}

// logprobs gives each word of text a log probability derived from seed,
// and top alternatives from the vocabulary.
func logprobs(text string, seed uint64, top *int32) *batcher.Logprobs {
	lp := &batcher.Logprobs{Content: []batcher.TokenLogprob{}}
	for i, w := range strings.Fields(text) {
		x := splitmix64(seed + uint64(i))
		t := batcher.TokenLogprob{Token: w, Logprob: -float64(x%2000) / 1000, Bytes: []byte(w)}
		if top != nil {
			for j := range int(*top) {
				alt := vocabulary[splitmix64(x+uint64(j))%uint64(len(vocabulary))]
				t.Top = append(t.Top, batcher.TopLogprob{Token: alt, Logprob: t.Logprob - float64(j+1), Bytes: []byte(alt)})
			}
		}
		lp.Content = append(lp.Content, t)
	}
	return lp
}

func badRequest(format string, args ...any) error {
	return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, StatusCode: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}
