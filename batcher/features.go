package batcher

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/internal/clip"
)

// Features is a set of the things beyond plain text that a backend can
// honour on a route, one bit each. A request that asks for one its route
// cannot honour is refused with a *ValidationError naming the field, never
// served with it dropped.
type Features uint32

// The features.
const (
	// FeatureTools: tools, tool_choice, parallel_tool_calls, assistant
	// tool_calls and tool messages' tool_call_id.
	FeatureTools Features = 1 << iota
	// FeatureJSONObject: response_format json_object.
	FeatureJSONObject
	// FeatureJSONSchema: response_format json_schema.
	FeatureJSONSchema
	// FeatureImages: image content parts.
	FeatureImages
	// FeatureNames: a message's name.
	FeatureNames
	// FeatureLogprobs: logprobs and top_logprobs.
	FeatureLogprobs
	// FeatureN: n > 1.
	FeatureN
	// FeaturePenalties: presence_penalty and frequency_penalty.
	FeaturePenalties
	// FeatureLogitBias: logit_bias.
	FeatureLogitBias
	// FeatureReasoningEffort: reasoning_effort.
	FeatureReasoningEffort
	// FeatureUser: user.
	FeatureUser
	// FeatureExtraBody: provider-specific body fields, forwarded verbatim.
	FeatureExtraBody
	// FeatureSeed: params.seed. Unlike the others a plain parameter, so a
	// backend that declares no features honours it; one that declares
	// them says whether it does (Anthropic's Messages API does not).
	FeatureSeed

	// AllFeatures is every feature.
	AllFeatures = FeatureSeed<<1 - 1
)

// Has reports whether f holds every feature of g.
func (f Features) Has(g Features) bool { return f&g == g }

// FeatureDeclarer is implemented by backends that honour more than plain
// text. Features reports what the backend honours for route (its backend
// model, its operation); it is asked once per route target when the
// Batcher is built (and on SetRoutes), and must not change its answer
// after. A backend that does not implement it honours none of them but
// FeatureSeed. A
// route's features are those every one of its targets honours, so a
// request never falls back to a backend that would drop part of it.
type FeatureDeclarer interface {
	Features(route, model string, op Operation) Features
}

// Limits on the chat surface's fields.
const (
	MaxContentParts   = 64
	MaxNameBytes      = 64
	MaxTools          = 128
	MaxToolCalls      = 128
	MaxSchemaBytes    = 64 << 10 // one tool's parameters, or the response format's schema
	MaxExtraBodyBytes = 16 << 10 // Request.Chat.Extra
	MaxUserBytes      = 256
	MaxChoices        = 8
	MaxLogitBias      = 300
	MaxTopLogprobs    = 20
)

// ReservedExtraFields are the body fields Batcher sets itself: Extra may
// not hold them.
var ReservedExtraFields = []string{
	"model", "messages", "prompt", "input", "stream", "stream_options", "n", "max_tokens", "max_completion_tokens",
	"temperature", "top_p", "stop", "seed", "tools", "tool_choice", "parallel_tool_calls", "response_format",
	"logprobs", "top_logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "user", "reasoning_effort",
	"functions", "function_call",
}

var reasoningEfforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true}

// blameFallback returns ve, the refusal of a field by the validation
// check run with the route's features have, naming the fallback that
// cannot take the field when the route's own backend can: the feature
// the field needs is the one that, added to have, gets check past it,
// and the first of targets (the route's backend, then its fallbacks)
// without it is at fault. Any other ve is returned as it is. It runs only
// on a refusal.
func blameFallback(ve *ValidationError, have Features, targets []TargetInfo, check func(Features) *ValidationError) *ValidationError {
	if len(targets) < 2 || ve.Reason != unsupportedReason {
		return ve
	}
	for f := Features(1); AllFeatures.Has(f); f <<= 1 {
		if have.Has(f) {
			continue
		}
		if again := check(have | f); again != nil && again.Field == ve.Field && again.Reason == ve.Reason {
			continue // not what the field needs
		}
		for i, t := range targets {
			if !t.Features.Has(f) {
				if i == 0 {
					return ve // the route's own backend
				}
				// The route's position, not the backend's name: backend
				// names are operator detail and stay off the wire.
				return invalid(ve.Field, "not supported by this model's fallback backend (its route's fallbacks[%d])", i-1)
			}
		}
		return ve
	}
	return ve
}

// validateRich checks r's fields beyond plain text, for a route of
// operation op honouring have. A plain request passes every check: validate
// calls it only when r is not plain (richFields, or a negative N).
func validateRich(r *Request, op Operation, have Features) *ValidationError {
	c := r.chat()
	if rp := r.Params.rich(); rp.N > 1 && op != OpChat && rp.N <= MaxChoices {
		// One rule for every door: a completion's answer is one text.
		return invalid("params.n", "only chat routes answer several choices, this one takes %s input; leave n unset or 1", op)
	}
	if ve := validateRichParams(r.Params.rich(), have); ve != nil {
		return ve
	}
	if c.User != "" {
		if len(c.User) > MaxUserBytes {
			return invalid("user", "must be at most %d bytes, got %d", MaxUserBytes, len(c.User))
		}
		if !have.Has(FeatureUser) {
			return unsupported("user")
		}
	}
	if len(c.Extra) > 0 {
		if ve := validateExtra(c.Extra, have); ve != nil {
			return ve
		}
	}
	chatOnly := len(c.Tools) > 0 || c.ToolChoice != (ToolChoice{}) || c.ParallelToolCalls != nil || c.ResponseFormat.Type != FormatDefault
	if !chatOnly {
		return nil
	}
	if op != OpChat {
		switch {
		case len(c.Tools) > 0:
			return invalid("tools", "only chat routes take tools, this one takes %s input", op)
		case c.ToolChoice != (ToolChoice{}):
			return invalid("tool_choice", "only chat routes take tool_choice, this one takes %s input", op)
		case c.ParallelToolCalls != nil:
			return invalid("parallel_tool_calls", "only chat routes take parallel_tool_calls, this one takes %s input", op)
		}
		return invalid("response_format", "only chat routes take response_format, this one takes %s input", op)
	}
	if ve := validateTools(r, have); ve != nil {
		return ve
	}
	return validateFormat(&c.ResponseFormat, have)
}

func validateRichParams(p *RichParams, have Features) *ValidationError {
	for _, x := range [...]struct {
		name string
		v    *float32
	}{{"params.presence_penalty", p.PresencePenalty}, {"params.frequency_penalty", p.FrequencyPenalty}} {
		if x.v == nil {
			continue
		}
		if isNaN(*x.v) || *x.v < -2 || *x.v > 2 {
			return invalid(x.name, "must be -2 to 2, got %v", *x.v)
		}
		if !have.Has(FeaturePenalties) {
			return unsupported(x.name)
		}
	}
	if p.N < 0 || p.N > MaxChoices {
		return invalid("params.n", "must be 1 to %d, got %d", MaxChoices, p.N)
	}
	if p.N > 1 && !have.Has(FeatureN) {
		return unsupported("params.n")
	}
	if len(p.LogitBias) > 0 {
		if len(p.LogitBias) > MaxLogitBias {
			return invalid("params.logit_bias", "must hold at most %d entries, got %d", MaxLogitBias, len(p.LogitBias))
		}
		for k, v := range p.LogitBias {
			if _, err := strconv.ParseUint(k, 10, 32); err != nil {
				return invalid("params.logit_bias", "keys must be token ids (decimal), got %q", clip.String(k))
			}
			if isNaN(v) || v < -100 || v > 100 {
				return invalid("params.logit_bias["+k+"]", "must be -100 to 100, got %v", v)
			}
		}
		if !have.Has(FeatureLogitBias) {
			return unsupported("params.logit_bias")
		}
	}
	if t := p.TopLogprobs; t != nil {
		if *t < 0 || *t > MaxTopLogprobs {
			return invalid("params.top_logprobs", "must be 0 to %d, got %d", MaxTopLogprobs, *t)
		}
		if !p.Logprobs {
			return invalid("params.top_logprobs", "needs logprobs to be true") // worded for every door
		}
	}
	if p.Logprobs && !have.Has(FeatureLogprobs) {
		return unsupported("params.logprobs")
	}
	if p.ReasoningEffort != "" {
		if !reasoningEfforts[p.ReasoningEffort] {
			return invalid("params.reasoning_effort", "must be none, minimal, low, medium or high, got %q", clip.String(p.ReasoningEffort))
		}
		if !have.Has(FeatureReasoningEffort) {
			return unsupported("params.reasoning_effort")
		}
	}
	return nil
}

func validateExtra(extra []byte, have Features) *ValidationError {
	if len(extra) > MaxExtraBodyBytes {
		return invalid("extra_body", "must be at most %d bytes as JSON, got %d", MaxExtraBodyBytes, len(extra))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(extra, &fields); err != nil || fields == nil {
		return invalid("extra_body", "must be a JSON object")
	}
	if len(fields) == 0 {
		return nil
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(ReservedExtraFields, k) {
			return invalid("extra_body."+clip.String(k), "is a field Batcher sets itself: use the request's own field")
		}
	}
	if !have.Has(FeatureExtraBody) {
		return unsupported("extra_body." + clip.String(keys[0]))
	}
	return nil
}

func validateTools(r *Request, have Features) *ValidationError {
	c := r.chat()
	if len(c.Tools) > MaxTools {
		return invalid("tools", "must hold at most %d tools, got %d", MaxTools, len(c.Tools))
	}
	for i := range c.Tools {
		t := &c.Tools[i]
		f := "tools[" + strconv.Itoa(i) + "]"
		if ve := checkName(f+".name", t.Name); ve != nil {
			return ve
		}
		for j := range i {
			if c.Tools[j].Name == t.Name {
				return invalid(f+".name", "%q is the name of tools[%d] too", t.Name, j)
			}
		}
		if t.Parameters != nil {
			if ve := checkObject(f+".parameters", t.Parameters); ve != nil {
				return ve
			}
		}
		if len(t.Description) > MaxSchemaBytes {
			return invalid(f+".description", "must be at most %d bytes, got %d", MaxSchemaBytes, len(t.Description))
		}
	}
	tc := &c.ToolChoice
	if len(c.Tools) == 0 {
		// OpenAI answers 400 on tool_choice without tools: a choice
		// among no tools would be dropped. none asks for what no tools
		// give anyway, so it is honoured.
		switch tc.Mode {
		case ToolChoiceAuto:
			return invalid("tool_choice", "auto needs tools: tool_choice is only allowed when tools are given")
		case ToolChoiceRequired:
			return invalid("tool_choice", "required needs tools: tool_choice is only allowed when tools are given")
		case ToolChoiceFunction:
			return invalid("tool_choice", "function %q needs tools: tool_choice is only allowed when tools are given", clip.String(tc.Function))
		}
		// And on parallel_tool_calls without tools: it says how to call
		// tools that are not there.
		if c.ParallelToolCalls != nil {
			return invalid("parallel_tool_calls", "needs tools: parallel_tool_calls is only allowed when tools are given")
		}
	}
	switch tc.Mode {
	case ToolChoiceDefault, ToolChoiceAuto, ToolChoiceNone:
		if tc.Function != "" {
			return invalid("tool_choice", "names a function without the function mode")
		}
	case ToolChoiceRequired:
	case ToolChoiceFunction:
		found := false
		for i := range c.Tools {
			found = found || c.Tools[i].Name == tc.Function
		}
		if !found {
			return invalid("tool_choice.function", "%q is not the name of a tool of the request", clip.String(tc.Function))
		}
	default:
		return invalid("tool_choice", "unknown mode %d", tc.Mode)
	}
	if !have.Has(FeatureTools) {
		switch {
		case len(c.Tools) > 0:
			return unsupported("tools")
		case c.ToolChoice != (ToolChoice{}):
			return unsupported("tool_choice")
		case c.ParallelToolCalls != nil:
			return unsupported("parallel_tool_calls")
		}
	}
	return nil
}

func validateFormat(rf *ResponseFormat, have Features) *ValidationError {
	switch rf.Type {
	case FormatDefault, FormatText, FormatJSONObject:
		if rf.Name != "" || rf.Schema != nil || rf.Strict || rf.Description != "" {
			return invalid("response_format", "name, description, schema and strict are for json_schema only")
		}
		if rf.Type == FormatJSONObject && !have.Has(FeatureJSONObject) {
			return unsupported("response_format")
		}
	case FormatJSONSchema:
		if ve := checkName("response_format.name", rf.Name); ve != nil {
			return ve
		}
		if rf.Schema == nil {
			return invalid("response_format.schema", "must be set for json_schema")
		}
		if ve := checkObject("response_format.schema", rf.Schema); ve != nil {
			return ve
		}
		if !have.Has(FeatureJSONSchema) {
			return unsupported("response_format")
		}
	default:
		return invalid("response_format.type", "unknown type %d", rf.Type)
	}
	return nil
}

// validateMessage checks the fields of message i beyond role and content,
// and that a tool message names the call it answers (OpenAI refuses one
// without a tool_call_id).
func validateMessage(m *Message, i int, have Features) *ValidationError {
	f := "input.chat.messages[" + strconv.Itoa(i) + "]"
	if len(m.Parts) > 0 {
		if m.Content != "" {
			return invalid(f+".content", "must be empty when parts are set")
		}
		if len(m.Parts) > MaxContentParts {
			return invalid(f+".parts", "must hold at most %d parts, got %d", MaxContentParts, len(m.Parts))
		}
		for j := range m.Parts {
			p := &m.Parts[j]
			pf := f + ".parts[" + strconv.Itoa(j) + "]"
			switch p.Kind {
			case PartText:
				if p.ImageURL != "" || p.Detail != "" {
					return invalid(pf, "a text part holds no image")
				}
			case PartImage:
				if p.Text != "" {
					return invalid(pf, "an image part holds no text")
				}
				if ve := checkImageURL(pf+".image.url", p.ImageURL); ve != nil {
					return ve
				}
				switch p.Detail {
				case "", "auto", "low", "high":
				default:
					return invalid(pf+".image.detail", "must be auto, low or high, got %q", clip.String(p.Detail))
				}
				if !have.Has(FeatureImages) {
					return unsupported(pf + ".image")
				}
			default:
				return invalid(pf, "must be set: text or image")
			}
		}
	}
	if m.Name != "" {
		if len(m.Name) > MaxNameBytes {
			return invalid(f+".name", "must be at most %d bytes, got %d", MaxNameBytes, len(m.Name))
		}
		if !have.Has(FeatureNames) {
			return unsupported(f + ".name")
		}
	}
	if len(m.ToolCalls) > 0 {
		if m.Role != "assistant" {
			return invalid(f+".tool_calls", "only assistant messages carry tool calls, got role %q", m.Role)
		}
		if len(m.ToolCalls) > MaxToolCalls {
			return invalid(f+".tool_calls", "must hold at most %d calls, got %d", MaxToolCalls, len(m.ToolCalls))
		}
		for j := range m.ToolCalls {
			c := &m.ToolCalls[j]
			cf := f + ".tool_calls[" + strconv.Itoa(j) + "]"
			if c.ID == "" || len(c.ID) > MaxIDBytes {
				return invalid(cf+".id", "must be 1 to %d bytes, got %d", MaxIDBytes, len(c.ID))
			}
			if ve := checkName(cf+".name", c.Name); ve != nil {
				return ve
			}
		}
		if !have.Has(FeatureTools) {
			return unsupported(f + ".tool_calls")
		}
	}
	if m.Role == "tool" && m.ToolCallID == "" {
		return invalid(f+".tool_call_id", "required for role tool: the id of the tool call the message answers")
	}
	if m.ToolCallID != "" {
		if m.Role != "tool" {
			return invalid(f+".tool_call_id", "only tool messages answer a tool call, got role %q", m.Role)
		}
		if len(m.ToolCallID) > MaxIDBytes {
			return invalid(f+".tool_call_id", "must be at most %d bytes, got %d", MaxIDBytes, len(m.ToolCallID))
		}
		if !have.Has(FeatureTools) {
			return unsupported(f + ".tool_call_id")
		}
	}
	return nil
}

// checkName checks a function's or schema's name: 1 to 64 bytes of a-z,
// A-Z, 0-9, _ and -, as OpenAI takes them.
func checkName(field, s string) *ValidationError {
	if s == "" || len(s) > MaxNameBytes {
		return invalid(field, "must be 1 to %d bytes, got %d", MaxNameBytes, len(s))
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return invalid(field, "must hold only a-z, A-Z, 0-9, _ and -, got %q", clip.String(s))
		}
	}
	return nil
}

// nameByte reports whether c may appear in a function's or schema's name.
func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// checkObject checks that b is one JSON object within MaxSchemaBytes.
func checkObject(field string, b []byte) *ValidationError {
	if len(b) > MaxSchemaBytes {
		return invalid(field, "must be at most %d bytes as JSON, got %d", MaxSchemaBytes, len(b))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return invalid(field, "must be a JSON object")
	}
	return nil
}

func checkImageURL(field, u string) *ValidationError {
	switch {
	case u == "":
		return invalid(field, "must be set")
	case strings.HasPrefix(u, "https://"), strings.HasPrefix(u, "http://"):
		if len(u) > 2048 {
			return invalid(field, "a URL must be at most 2048 bytes, got %d", len(u))
		}
	case strings.HasPrefix(u, "data:image/"):
		if !strings.Contains(u, ";base64,") {
			return invalid(field, "a data URL must be base64: data:image/...;base64,...")
		}
	default:
		return invalid(field, "must be an http(s) URL or a data:image/ URL")
	}
	return nil
}

// unsupportedReason is the Reason of a field the route's backends cannot
// honour; blameFallback names the fallback at fault when it is one.
const unsupportedReason = "not supported by this model's backend"

// unsupported is the error of a field the route's backends cannot honour.
func unsupported(field string) *ValidationError {
	return &ValidationError{Field: field, Reason: unsupportedReason}
}
