package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
// chatFeatures on chat routes, nothing beyond text elsewhere.
func (p *Provider) Features(_, _ string, op batcher.Operation) batcher.Features {
	if op == batcher.OpChat {
		return chatFeatures
	}
	return 0
}

// answerChat turns the generated completion c of a chat request into its
// answer: a tool call when the request's tools and messages call for one,
// JSON when its response format asks for it, n choices and logprobs when
// asked. It returns an *batcher.UpstreamError for a schema that does not
// compile, as a provider answers 400.
func (p *Provider) answerChat(model string, r *batcher.Request, c completion, maxTokens int32, sample uint64) (batcher.Response, error) {
	resp := batcher.Response{Text: c.text, FinishReason: c.finish}
	n := max(int(r.Params.N), 1)
	choices := make([]batcher.Choice, n)
	for k := range choices {
		ck := c
		if k > 0 {
			ck = generate(model, &r.Input, &r.Params, maxTokens, splitmix64(sample+uint64(k)))
		}
		ch, err := p.choice(r, ck, uint64(k))
		if err != nil {
			return batcher.Response{}, err
		}
		choices[k] = ch
	}
	ch := &choices[0]
	resp.Text, resp.ToolCalls, resp.FinishReason, resp.Logprobs = ch.Text, ch.ToolCalls, ch.FinishReason, ch.Logprobs
	if n > 1 {
		resp.Choices = choices
	}
	return resp, nil
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
		switch rf := &r.ResponseFormat; rf.Type {
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
	if r.Params.Logprobs {
		ch.Logprobs = logprobs(ch.Text, seed, r.Params.TopLogprobs)
	}
	return ch, nil
}

// toolToCall picks the tool a request's answer calls, or nil: the one
// tool_choice names; with tool_choice required, the tool the last user
// message names, else the first; with auto (or unset), the tool the last
// user message names, if any. A conversation whose last message is a tool
// result gets a text answer unless tool_choice names a function.
func toolToCall(r *batcher.Request) *batcher.Tool {
	tc := &r.ToolChoice
	if len(r.Tools) == 0 || tc.Mode == batcher.ToolChoiceNone {
		return nil
	}
	if tc.Mode == batcher.ToolChoiceFunction {
		for i := range r.Tools {
			if r.Tools[i].Name == tc.Function {
				return &r.Tools[i]
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
	for i := range r.Tools {
		if strings.Contains(text, r.Tools[i].Name) {
			return &r.Tools[i]
		}
	}
	if tc.Mode == batcher.ToolChoiceRequired {
		return &r.Tools[0]
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
	var s any
	if err := json.Unmarshal(sch, &s); err != nil {
		return nil, err
	}
	g := gen{x: seed, hint: hint}
	v := g.value(s, 0)
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if err := p.schemas.Validate(sch, out); err != nil {
		if errors.Is(err, schema.ErrInvalidSchema) {
			return nil, err
		}
		return nil, fmt.Errorf("the sim cannot generate an instance of this schema: %v", err)
	}
	return out, nil
}

// gen generates JSON values from a schema: the first of enum or const,
// every property of an object (so that strict schemas, which require them
// all, are met), one item of an array (or minItems), numbers within
// minimum and maximum, strings from the generated text's words.
type gen struct {
	x    uint64
	hint []string
}

func (g *gen) next() uint64 { g.x = splitmix64(g.x); return g.x }

const maxSchemaDepth = 16

func (g *gen) value(s any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > maxSchemaDepth {
		return nil
	}
	if c, ok := m["const"]; ok {
		return c
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[g.next()%uint64(len(e))]
	}
	for _, k := range [...]string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := m[k].([]any); ok && len(alts) > 0 {
			return g.value(alts[0], depth+1)
		}
	}
	typ, _ := m["type"].(string)
	if ts, ok := m["type"].([]any); ok {
		for _, t := range ts {
			if t, _ := t.(string); t != "null" {
				typ = t
				break
			}
		}
	}
	if typ == "" {
		if _, ok := m["properties"]; ok {
			typ = "object"
		}
	}
	switch typ {
	case "object":
		props, _ := m["properties"].(map[string]any)
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		obj := make(map[string]any, len(keys))
		for _, k := range keys {
			obj[k] = g.value(props[k], depth+1)
		}
		return obj
	case "array":
		n := 1
		if mi, ok := m["minItems"].(float64); ok && mi > 1 {
			n = min(int(mi), 8)
		}
		if mx, ok := m["maxItems"].(float64); ok && int(mx) < n {
			n = int(mx)
		}
		arr := make([]any, n)
		for i := range arr {
			arr[i] = g.value(m["items"], depth+1)
		}
		return arr
	case "integer", "number":
		lo, hi := 0.0, 100.0
		if v, ok := m["minimum"].(float64); ok {
			lo = v
			hi = max(hi, lo+100)
		}
		if v, ok := m["maximum"].(float64); ok {
			hi = v
		}
		if hi < lo {
			hi = lo
		}
		v := lo + float64(g.next()%uint64(hi-lo+1))
		if typ == "number" && v < hi {
			v += 0.5
		}
		return v
	case "boolean":
		return g.next()%2 == 0
	case "null":
		return nil
	}
	// A string, or a schema that says nothing: a word of the answer.
	s2 := g.hint[g.next()%uint64(len(g.hint))]
	if ml, ok := m["minLength"].(float64); ok {
		for len(s2) < int(ml) {
			s2 += " " + g.hint[g.next()%uint64(len(g.hint))]
		}
	}
	if ml, ok := m["maxLength"].(float64); ok && len(s2) > int(ml) {
		s2 = cutUTF8(s2, int(ml))
	}
	return s2
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
