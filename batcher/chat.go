package batcher

import (
	"encoding/binary"
	"slices"
	"strconv"
)

// The chat surface beyond text: content parts, tools and tool calls,
// response formats, and the parameters and fields that only some backends
// honour. A plain text request sets none of it and costs nothing for it:
// Request.Rich is false, its lane and dedup keys are what they were, and
// its Request.Chat and Result.Chat stay nil, so that the core's types, which
// every request copies, carry one pointer each for the chat surface.

// PartKind is the kind of a content part.
type PartKind uint8

// The content part kinds.
const (
	PartText PartKind = iota + 1
	PartImage
)

// ContentPart is one part of a message's content: text or an image.
type ContentPart struct {
	Kind PartKind
	Text string // PartText
	// ImageURL is an https URL or a data URL (PartImage); Detail is "",
	// "auto", "low" or "high".
	ImageURL string
	Detail   string
}

// ToolCall is one function call made by the model.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON object as text, as the model wrote it
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the arguments' JSON Schema as a JSON object; nil: no
	// arguments.
	Parameters []byte
	Strict     bool
}

// ToolChoiceMode says whether the model must call a tool.
type ToolChoiceMode uint8

// The tool choice modes.
const (
	ToolChoiceDefault  ToolChoiceMode = iota // unset: the upstream's default
	ToolChoiceAuto                           // the model decides
	ToolChoiceNone                           // no tool call
	ToolChoiceRequired                       // at least one tool call
	ToolChoiceFunction                       // a call of ToolChoice.Function
)

// ToolChoice is a tool-calling mode, or the one function the model must
// call (Mode ToolChoiceFunction).
type ToolChoice struct {
	Mode     ToolChoiceMode
	Function string
}

// FormatType is the shape of an answer.
type FormatType uint8

// The response format types.
const (
	FormatDefault    FormatType = iota // unset: text
	FormatText                         // text, asked for explicitly
	FormatJSONObject                   // any JSON object
	FormatJSONSchema                   // JSON validating against Schema
)

// ResponseFormat says what shape an answer must take.
type ResponseFormat struct {
	Type FormatType
	// FormatJSONSchema only.
	Name        string
	Description string
	Schema      []byte // a JSON object
	Strict      bool
}

// ChatOptions are a chat request's options beyond text (Request.Chat). The
// zero ChatOptions and a nil Request.Chat mean the same: none.
type ChatOptions struct {
	// Tools are the functions the model may call; ToolChoice whether and
	// which it must; ParallelToolCalls whether it may call several at once
	// (nil: the upstream's default).
	Tools             []Tool
	ToolChoice        ToolChoice
	ParallelToolCalls *bool
	// ResponseFormat is the answer's shape.
	ResponseFormat ResponseFormat
	// User names the end user, forwarded to the upstream.
	User string
	// Extra holds provider-specific body fields as one JSON object,
	// forwarded verbatim by backends that declare FeatureExtraBody.
	Extra []byte
}

// ChatOptions returns a copy of r's chat options: the zero options when
// r.Chat is nil.
func (r *Request) ChatOptions() ChatOptions {
	if r.Chat == nil {
		return ChatOptions{}
	}
	return *r.Chat
}

// noChat is the chat options of a request whose Chat is nil (chat); never
// written.
var noChat ChatOptions

// chat returns r's chat options, never nil: read only.
func (r *Request) chat() *ChatOptions {
	if r.Chat != nil {
		return r.Chat
	}
	return &noChat
}

// set reports whether c sets any option. It is written to be cheap, like
// richFields.
func (c *ChatOptions) set() bool {
	return len(c.Tools)|len(c.Extra)|len(c.User)|len(c.ToolChoice.Function) != 0 ||
		c.ToolChoice.Mode != ToolChoiceDefault || c.ResponseFormat.Type != FormatDefault || c.ParallelToolCalls != nil
}

// IsZero reports whether c sets nothing, so that a translator can leave a
// plain request's Chat nil.
func (c *ChatOptions) IsZero() bool {
	rf := &c.ResponseFormat
	return c.Tools == nil && c.ToolChoice == (ToolChoice{}) && c.ParallelToolCalls == nil && c.User == "" && c.Extra == nil &&
		rf.Type == FormatDefault && rf.Name == "" && rf.Description == "" && rf.Schema == nil && !rf.Strict
}

// MutableChat returns r.Chat, first setting it to new zero options when it
// is nil: for a caller that builds a request's chat options one by one.
func (r *Request) MutableChat() *ChatOptions {
	if r.Chat == nil {
		r.Chat = new(ChatOptions)
	}
	return r.Chat
}

// ChatOutput is a chat answer's parts beyond its text (Result.Chat,
// Response.Chat): its tool calls, refusal and log probabilities, and with
// Params.Rich.N > 1 every choice, Choices[0] being the answer itself. The zero
// ChatOutput and a nil pointer mean the same: none.
type ChatOutput struct {
	ToolCalls []ToolCall
	Refusal   string
	Logprobs  *Logprobs
	Choices   []Choice
}

// NewChatOutput returns the chat output holding calls, refusal, lp and
// choices, or nil when it would hold nothing: what a backend sets as
// Response.Chat, so that a plain text answer allocates none.
func NewChatOutput(calls []ToolCall, refusal string, lp *Logprobs, choices []Choice) *ChatOutput {
	if calls == nil && refusal == "" && lp == nil && choices == nil {
		return nil
	}
	return &ChatOutput{ToolCalls: calls, Refusal: refusal, Logprobs: lp, Choices: choices}
}

// ChatOutput returns a copy of r's chat output: the zero output when
// r.Chat is nil.
func (r *Result) ChatOutput() ChatOutput {
	if r.Chat == nil {
		return ChatOutput{}
	}
	return *r.Chat
}

// MutableChat returns r.Chat, first setting it to a new zero output when
// it is nil.
func (r *Result) MutableChat() *ChatOutput {
	if r.Chat == nil {
		r.Chat = new(ChatOutput)
	}
	return r.Chat
}

// ChatOutput returns a copy of r's chat output: the zero output when
// r.Chat is nil.
func (r *Response) ChatOutput() ChatOutput {
	if r.Chat == nil {
		return ChatOutput{}
	}
	return *r.Chat
}

// MutableChat returns r.Chat, first setting it to a new zero output when
// it is nil.
func (r *Response) MutableChat() *ChatOutput {
	if r.Chat == nil {
		r.Chat = new(ChatOutput)
	}
	return r.Chat
}

// FinishToolCalls: the model called tools (see ChatOutput.ToolCalls).
const FinishToolCalls FinishReason = FinishContentFilter + 1

// Logprobs are the log probabilities of an answer's tokens.
type Logprobs struct {
	Content []TokenLogprob
	Refusal []TokenLogprob
}

// TokenLogprob is one output token, its log probability, and the most
// likely tokens at its position.
type TokenLogprob struct {
	Token   string
	Logprob float64
	Bytes   []byte
	Top     []TopLogprob
}

// TopLogprob is one of the most likely tokens at a position.
type TopLogprob struct {
	Token   string
	Logprob float64
	Bytes   []byte
}

// Choice is one of the n answers of a chat request with Params.Rich.N > 1.
type Choice struct {
	Text         string
	ToolCalls    []ToolCall
	Refusal      string
	Logprobs     *Logprobs
	FinishReason FinishReason
}

// Rich reports whether r asks for anything beyond plain text chat: content
// parts, names, tool calls or tool answers in its messages, tools, a
// response format, a parameter beyond the five every backend takes, a user
// or extra body fields. Only a plain request may be packed into one prompt
// with others (backend/openai's packs).
func (r *Request) Rich() bool {
	if r.richFields() {
		return true
	}
	for i := range r.Input.Messages {
		if r.Input.Messages[i].rich() {
			return true
		}
	}
	return false
}

// rich reports whether m carries more than a role and a text: parts, a
// name, tool calls, or the answer to one (role tool, whose tool_call_id
// validateMessage requires, so that a tool message always goes through it).
func (m *Message) rich() bool {
	return len(m.Parts) > 0 || m.Name != "" || len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.Role == "tool"
}

// Text returns the message's text: Content, or its text parts joined by
// newlines.
func (m *Message) Text() string {
	if len(m.Parts) == 0 {
		return m.Content
	}
	n := 0
	for _, p := range m.Parts {
		if p.Kind == PartText {
			n += len(p.Text) + 1
		}
	}
	b := make([]byte, 0, n)
	for _, p := range m.Parts {
		if p.Kind == PartText {
			if len(b) > 0 {
				b = append(b, '\n')
			}
			b = append(b, p.Text...)
		}
	}
	return string(b)
}

// richFields reports whether r sets any request-level field or parameter
// beyond plain text (Rich without looking at the messages).
func (r *Request) richFields() bool {
	return r.Chat != nil && r.Chat.set() || r.Params.hasRich()
}

// mayBeRich is richFields' first look, for the admission path: false for
// a plain request, true for a rich one, and true for one whose Chat or
// Params.Rich points to zero options too (or to n = 1), for which the
// caller's next step (richKey, validateRich, the whole lane key) finds
// that it is plain after all.
//
// Every request's admission calls it, where a plain request reads every
// field it names, so it is written to be cheap and inlined: two pointers.
func (r *Request) mayBeRich() bool { return r.Chat != nil || r.Params.Rich != nil }

// noRich is the rich parameters of Params whose Rich is nil (rich); never
// written.
var noRich RichParams

// rich returns p's rich parameters: *p.Rich, or zero ones when it is nil.
func (p *Params) rich() *RichParams {
	if p.Rich != nil {
		return p.Rich
	}
	return &noRich
}

// hasRich reports whether p sets a parameter beyond the five every backend
// takes.
func (p *Params) hasRich() bool { return p.Rich != nil && p.Rich.set() }

// set reports whether p sets a parameter that changes an answer: as IsZero
// but for n = 1, which asks for the one choice a request gets anyway.
func (p *RichParams) set() bool {
	return len(p.LogitBias)|len(p.ReasoningEffort) != 0 || p.Logprobs || p.N > 1 ||
		p.PresencePenalty != nil || p.FrequencyPenalty != nil || p.TopLogprobs != nil
}

// richKey encodes everything of r beyond plain text that shapes its answer,
// except its messages (the dedup key's input holds those): empty for a
// plain request. Two requests with different keys never share a lane on a
// target that shares ParamRich, nor a deduplicated answer.
func richKey(r *Request) string {
	if !r.richFields() {
		return ""
	}
	return string(appendRich(make([]byte, 0, 128), r))
}

// appendRich appends the encoding of r's fields beyond plain text, except
// its messages, each length-prefixed or behind a presence byte.
func appendRich(b []byte, r *Request) []byte {
	p, c := r.Params.rich(), r.chat()
	b = appendLen(b, len(c.Tools))
	for i := range c.Tools {
		t := &c.Tools[i]
		b = appendStr(b, t.Name)
		b = appendStr(b, t.Description)
		b = appendBytes(b, t.Parameters)
		b = appendBool(b, t.Strict)
	}
	b = append(b, byte(c.ToolChoice.Mode))
	b = appendStr(b, c.ToolChoice.Function)
	b = appendOpt(b, c.ParallelToolCalls != nil, c.ParallelToolCalls != nil && *c.ParallelToolCalls)
	rf := &c.ResponseFormat
	b = append(b, byte(rf.Type))
	b = appendStr(b, rf.Name)
	b = appendStr(b, rf.Description)
	b = appendBytes(b, rf.Schema)
	b = appendBool(b, rf.Strict)
	b = appendStr(b, c.User)
	b = appendBytes(b, c.Extra)
	b = appendF32(b, p.PresencePenalty)
	b = appendF32(b, p.FrequencyPenalty)
	b = strconv.AppendInt(b, int64(p.N), 10)
	b = appendBool(b, p.Logprobs)
	if p.TopLogprobs != nil {
		b = strconv.AppendInt(b, int64(*p.TopLogprobs), 10)
	}
	b = append(b, ';')
	b = appendStr(b, p.ReasoningEffort)
	b = appendLen(b, len(p.LogitBias))
	if len(p.LogitBias) > 0 {
		keys := make([]string, 0, len(p.LogitBias))
		for k := range p.LogitBias {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendStr(b, k)
			b = strconv.AppendFloat(b, float64(p.LogitBias[k]), 'g', -1, 32)
		}
	}
	return b
}

// appendKey appends the message's fields beyond role and content, for the
// dedup key.
func (m *Message) appendKey(b []byte) []byte {
	b = appendStr(b, m.Name)
	b = appendStr(b, m.ToolCallID)
	b = appendLen(b, len(m.Parts))
	for _, p := range m.Parts {
		b = append(b, byte(p.Kind))
		b = appendStr(b, p.Text)
		b = appendStr(b, p.ImageURL)
		b = appendStr(b, p.Detail)
	}
	b = appendLen(b, len(m.ToolCalls))
	for _, c := range m.ToolCalls {
		b = appendStr(b, c.ID)
		b = appendStr(b, c.Name)
		b = appendStr(b, c.Arguments)
	}
	return b
}

// Image token estimates: OpenAI's for a low-detail image, and for a
// 1024x1024 one at high detail.
const (
	lowImageTokens  = 85
	highImageTokens = 765
)

// richTokens estimates the prompt tokens of r's fields beyond text: tool
// definitions, the response schema, tool calls in its messages, and a
// fixed cost per image in place of its URL's bytes (which Input.Size
// counts, and which a data URL would make far too many): the result may be
// negative, to take those bytes back.
func (r *Request) richTokens() int {
	n, c := 0, r.chat()
	for i := range c.Tools {
		t := &c.Tools[i]
		n += (len(t.Name)+len(t.Description)+len(t.Parameters))/4 + 8
	}
	n += len(c.ResponseFormat.Schema) / 4
	for i := range r.Input.Messages {
		for _, p := range r.Input.Messages[i].Parts {
			if p.Kind != PartImage {
				continue
			}
			n -= len(p.ImageURL) / 4
			if p.Detail == "low" {
				n += lowImageTokens
			} else {
				n += highImageTokens
			}
		}
	}
	return n
}

func appendLen(b []byte, n int) []byte { return binary.AppendUvarint(b, uint64(n)) }

func appendStr(b []byte, s string) []byte { return append(appendLen(b, len(s)), s...) }

func appendBytes(b, s []byte) []byte { return append(appendLen(b, len(s)), s...) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendOpt(b []byte, set, v bool) []byte {
	return appendBool(appendBool(b, set), v)
}

func appendF32(b []byte, f *float32) []byte {
	if f == nil {
		return append(b, 'u')
	}
	return strconv.AppendFloat(append(b, 'f'), float64(*f), 'g', -1, 32)
}
