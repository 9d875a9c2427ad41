package llmsim

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Anthropic's Messages API: POST /v1/messages, answered with the same
// deterministic text, tool calls, limits and faults as the OpenAI
// endpoints, in Anthropic's shapes:
//
//   - the key comes as x-api-key (Config.APIKey), and the anthropic-version
//     header is required (400 without it);
//   - max_tokens is required; the system prompt is the top-level system
//     field; messages alternate content blocks (text, image, tool_use,
//     tool_result), and every tool_use of an assistant turn must be
//     answered by a tool_result in the next user turn (400 otherwise);
//   - stop_sequences cut the reply where one first appears (stop_reason
//     stop_sequence);
//   - the rate limits answer 429 rate_limit_error with retry-after and send
//     anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset} (reset
//     an RFC 3339 time) on every answer; the ErrorRate fault answers 500
//     api_error or 529 overloaded_error (with retry-after);
//   - "stream": true answers with Anthropic's events: message_start,
//     content_block_start, ping, content_block_delta (text_delta,
//     input_json_delta), content_block_stop, message_delta (stop_reason and
//     the output tokens), message_stop; the mid-stream faults apply.
//
// Errors have Anthropic's shape: {"type":"error","error":{"type":...,
// "message":...}}.

// anthropicVersionHeader must come on every call (any version is
// accepted); a call without it gets a 400, as from Anthropic.
const anthropicVersionHeader = "anthropic-version"

type anthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	System        json.RawMessage    `json:"system"`
	Messages      []anthropicMessage `json:"messages"`
	StopSequences []string           `json:"stop_sequences"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	TopK          *int               `json:"top_k"`
	Stream        bool               `json:"stream"`
	Tools         []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
	Metadata *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is one content block of a request or an answer.
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// image
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type anthropicResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// anthropicAnswer marks an answer of the Anthropic dialect and carries
// what its stream needs.
type anthropicAnswer struct {
	resp *anthropicResponse
	// stream plans the streamed answer's text and faults (its words);
	// nil: not streamed.
	stream *streamAnswer
}

// blocks decodes a message's or a system prompt's content: a string (one
// text block) or an array of blocks.
func blocks(raw json.RawMessage) ([]anthropicBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, errors.New("must be a string or an array of content blocks")
	}
	return bs, nil
}

// blockText is the text of a block (a tool_result's content included).
func blockText(b *anthropicBlock) string {
	switch b.Type {
	case "text":
		return b.Text
	case "tool_result":
		inner, err := blocks(b.Content)
		if err != nil {
			return ""
		}
		var sb strings.Builder
		for i := range inner {
			sb.WriteString(blockText(&inner[i]))
		}
		return sb.String()
	}
	return ""
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.st.chat.Add(1)
	var req anthropicRequest
	if !s.beginAnthropic(w, r, &req) {
		return
	}
	if status, typ, msg := s.checkMessages(&req); msg != "" {
		anthropicError(w, status, typ, msg)
		return
	}
	// The OpenAI shape of the same request, for the tool-call logic
	// (tools.go), which both dialects share.
	creq := chatRequest{Model: req.Model}
	if msg := anthropicTools(&req, &creq); msg != "" {
		anthropicBadRequest(w, msg)
		return
	}
	// An input_schema that is not a valid JSON Schema is refused, as
	// Anthropic refuses it, by the check the OpenAI dialect applies.
	if i, err := s.badToolSchema(&creq); i >= 0 {
		anthropicBadRequest(w, "tools."+strconv.Itoa(i)+".custom.input_schema: JSON schema is invalid: "+cutRunes(err.Error(), 256))
		return
	}
	prompt, last, msg := anthropicTurns(&req, &creq)
	if msg != "" {
		anthropicBadRequest(w, msg)
		return
	}
	a := s.anthropicReply(&req, &creq, prompt, last)
	s.serve(w, r, a)
}

// checkMessages checks a Messages request's fields; msg "" when good, else
// the error's status, type and message.
func (s *Server) checkMessages(req *anthropicRequest) (status int, typ, msg string) {
	bad := func(m string) (int, string, string) { return http.StatusBadRequest, "invalid_request_error", m }
	switch {
	case req.Model == "":
		return bad("model: Field required")
	case !s.models[req.Model]:
		return http.StatusNotFound, "not_found_error", "model: " + cutRunes(req.Model, 64)
	case req.MaxTokens == nil:
		return bad("max_tokens: Field required")
	case *req.MaxTokens < 1:
		return bad("max_tokens: Input should be greater than or equal to 1")
	case len(req.Messages) == 0:
		return bad("messages: at least one message is required")
	case req.Temperature != nil && (*req.Temperature < 0 || *req.Temperature > 1):
		return bad("temperature: range: 0..1")
	case req.TopP != nil && (*req.TopP < 0 || *req.TopP > 1):
		return bad("top_p: range: 0..1")
	}
	return 0, "", ""
}

// anthropicTools checks the request's tools and tool_choice and puts them
// into creq in OpenAI's shape; the message of a bad request, "" when good.
func anthropicTools(req *anthropicRequest, creq *chatRequest) string {
	for _, t := range req.Tools {
		if t.Name == "" {
			return "tools: name: Field required"
		}
		if len(t.InputSchema) == 0 {
			return "tools." + cutRunes(t.Name, 64) + ".input_schema: Field required"
		}
		var ct struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		ct.Function.Name, ct.Function.Parameters = t.Name, t.InputSchema
		creq.Tools = append(creq.Tools, ct)
	}
	tc := req.ToolChoice
	if tc == nil {
		return ""
	}
	switch tc.Type {
	case "auto":
		creq.ToolChoice = json.RawMessage(`"auto"`)
	case "any":
		creq.ToolChoice = json.RawMessage(`"required"`)
	case "none":
		creq.ToolChoice = json.RawMessage(`"none"`)
	case "tool":
		if tc.Name == "" {
			return "tool_choice.name: Field required"
		}
		creq.ToolChoice, _ = json.Marshal(map[string]any{"function": map[string]string{"name": tc.Name}})
	default:
		return "tool_choice.type: must be auto, any, tool or none"
	}
	if tc.Type != "none" && len(req.Tools) == 0 {
		return "tool_choice: may only be specified while providing tools"
	}
	return ""
}

// anthropicTurns checks the system prompt and the turns and puts the turns
// into creq in OpenAI's shape. It returns the prompt's tokens and the last
// user turn's text, or the message of a bad request.
func anthropicTurns(req *anthropicRequest, creq *chatRequest) (prompt int, last, msg string) {
	system, err := blocks(req.System)
	if err != nil {
		return 0, "", "system: " + err.Error()
	}
	prompt = 3
	for i := range system {
		if system[i].Type != "text" {
			return 0, "", "system: blocks must be text"
		}
		prompt += Tokens(system[i].Text) + 4
	}
	var pending map[string]bool // the tool_use ids of the last assistant turn
	for i, m := range req.Messages {
		at := "messages." + strconv.Itoa(i)
		if m.Role != "user" && m.Role != "assistant" {
			return 0, "", at + ".role: Input should be 'user' or 'assistant'"
		}
		bs, err := blocks(m.Content)
		if err != nil {
			return 0, "", at + ".content: " + err.Error()
		}
		if len(bs) == 0 {
			return 0, "", at + ": all messages must have non-empty content"
		}
		text, onlyResults, msg := turnBlocks(m.Role, bs, at, pending)
		if msg != "" {
			return 0, "", msg
		}
		pending = nil
		if m.Role == "assistant" {
			for j := range bs {
				if bs[j].Type == "tool_use" {
					if pending == nil {
						pending = map[string]bool{}
					}
					pending[bs[j].ID] = true
				}
			}
		}
		role := m.Role
		if role == "user" && onlyResults {
			role = "tool"
		}
		creq.Messages = append(creq.Messages, chatMessage{Role: role, Content: content(text)})
		if m.Role == "user" {
			last = text
		}
		prompt += Tokens(text) + 4
	}
	if last == "" {
		last = string(creq.Messages[len(creq.Messages)-1].Content)
	}
	return prompt, last, ""
}

// turnBlocks checks one turn's blocks (at is its path) against the tool
// uses the turn before left pending, and returns its text and whether it
// holds tool results only; or the message of a bad request.
func turnBlocks(role string, bs []anthropicBlock, at string, pending map[string]bool) (string, bool, string) {
	var text strings.Builder
	onlyResults := true
	answered := map[string]bool{}
	for j := range bs {
		b := &bs[j]
		bat := at + ".content." + strconv.Itoa(j)
		switch b.Type {
		case "text":
		case "image":
			if role != "user" || b.Source == nil || (b.Source.Type == "base64" && (b.Source.Data == "" || b.Source.MediaType == "")) ||
				(b.Source.Type == "url" && b.Source.URL == "") || (b.Source.Type != "base64" && b.Source.Type != "url") {
				return "", false, bat + ".image: a user turn's image needs a source of type base64 (media_type, data) or url"
			}
		case "tool_use":
			if role != "assistant" || b.ID == "" || b.Name == "" {
				return "", false, bat + ".tool_use: an assistant turn's tool_use needs an id and a name"
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(b.Input, &obj) != nil || obj == nil {
				return "", false, bat + ".tool_use.input: Input should be a valid dictionary"
			}
		case "tool_result":
			if role != "user" || !pending[b.ToolUseID] {
				return "", false, bat + ": unexpected `tool_use_id` found in `tool_result` blocks: " + cutRunes(b.ToolUseID, 64) +
					". Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
			}
			answered[b.ToolUseID] = true
		default:
			return "", false, bat + ".type: unknown content block type " + strconv.Quote(cutRunes(b.Type, 32))
		}
		if b.Type != "tool_result" {
			onlyResults = false
		}
		text.WriteString(blockText(b))
	}
	for id := range pending {
		if !answered[id] {
			return "", false, at + ": `tool_use` ids were found without `tool_result` blocks immediately after: " + cutRunes(id, 64)
		}
	}
	return text.String(), onlyResults, ""
}

// anthropicReply makes the answer to a checked request: its text (cut at
// a stop sequence) or a tool call, and its usage.
func (s *Server) anthropicReply(req *anthropicRequest, creq *chatRequest, prompt int, last string) *answer {
	maxTokens := *req.MaxTokens
	text, cut := Reply(last, maxTokens, s.cfg.ReplyTokens)
	stop := "end_turn"
	if cut {
		stop = "max_tokens"
	}
	var stopSeq *string
	for _, seq := range req.StopSequences {
		if seq == "" {
			continue
		}
		if i := strings.Index(text, seq); i >= 0 {
			text, stop, stopSeq = text[:i], "stop_sequence", &seq
			break
		}
	}
	resp := &anthropicResponse{
		ID: "msg_sim" + strconv.FormatUint(s.seq.Add(1), 10), Type: "message", Role: "assistant", Model: req.Model,
		StopSequence: stopSeq,
	}
	completion := text
	if call, ok := s.toolCall(creq, last); ok { // tools.go
		stop, resp.StopSequence = "tool_use", nil
		id := "toolu_" + strings.TrimPrefix(call.ID, "call_")
		input := json.RawMessage(call.Function.Arguments)
		if !json.Valid(input) {
			// A malformed tool call (ToolCallMalformedRate): Anthropic's
			// input is a JSON object in the body, so the fault shows as
			// an object other than the schema's.
			input = json.RawMessage(`{"llmsim_malformed":true}`)
		}
		resp.Content = []anthropicBlock{{Type: "tool_use", ID: id, Name: call.Function.Name, Input: input}}
		completion = string(input)
	} else {
		resp.Content = []anthropicBlock{{Type: "text", Text: text}}
	}
	resp.StopReason = &stop
	resp.Usage = anthropicUsage{InputTokens: prompt, OutputTokens: Tokens(completion)}
	a := &answer{promptTokens: prompt, completionTokens: resp.Usage.OutputTokens, cost: prompt + maxTokens, body: resp,
		anthropic: &anthropicAnswer{resp: resp}}
	if req.Stream {
		a.anthropic.stream = s.newStream(chatStream, resp.ID, req.Model, text, nil, stop, nil)
	}
	return a
}

// beginAnthropic counts the call, checks its key and version header, and
// decodes its body into req.
func (s *Server) beginAnthropic(w http.ResponseWriter, r *http.Request, req any) bool {
	s.st.requests.Add(1)
	if s.cfg.APIKey != "" {
		got := r.Header.Get("x-api-key")
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) != 1 {
			anthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return false
		}
	}
	if r.Header.Get(anthropicVersionHeader) == "" {
		anthropicBadRequest(w, "anthropic-version: header is required")
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			anthropicError(w, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", s.cfg.MaxRequestBytes))
			return false
		}
		anthropicBadRequest(w, "Could not read the request body.")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(req); err != nil {
		anthropicBadRequest(w, "There was an issue with the JSON body of your request: "+cutRunes(err.Error(), 120))
		return false
	}
	return true
}

func anthropicBadRequest(w http.ResponseWriter, msg string) {
	anthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// anthropicHeaders turns the x-ratelimit-* headers limits.take wrote into
// Anthropic's anthropic-ratelimit-* ones (the reset an RFC 3339 time), and
// drops retry-after-ms, which Anthropic does not send.
func anthropicHeaders(h http.Header, now time.Time) {
	h.Del("retry-after-ms")
	for _, kind := range []string{"requests", "tokens"} {
		limit, remaining, reset := "x-ratelimit-limit-"+kind, "x-ratelimit-remaining-"+kind, "x-ratelimit-reset-"+kind
		if v := h.Get(limit); v != "" {
			h.Set("anthropic-ratelimit-"+kind+"-limit", v)
		}
		if v := h.Get(remaining); v != "" {
			h.Set("anthropic-ratelimit-"+kind+"-remaining", v)
		}
		if d, err := time.ParseDuration(h.Get(reset)); err == nil {
			// Whole seconds, rounded up, as Anthropic's resets are.
			t := now.Add(d).Add(time.Second - 1).Truncate(time.Second)
			h.Set("anthropic-ratelimit-"+kind+"-reset", t.UTC().Format(time.RFC3339))
		}
		h.Del(limit)
		h.Del(remaining)
		h.Del(reset)
	}
}

// anthropicFault writes the ErrorRate fault: 500 api_error, or 529
// overloaded_error with retry-after.
func (s *Server) anthropicFault(w http.ResponseWriter, r *http.Request) {
	if s.draw() < 0.5 {
		s.cfg.Logger.Debug("fault: server error", "path", r.URL.Path, "status", http.StatusInternalServerError)
		anthropicError(w, http.StatusInternalServerError, "api_error", "Internal server error")
		return
	}
	s.cfg.Logger.Debug("fault: overloaded", "path", r.URL.Path, "status", 529)
	w.Header().Set("retry-after", "1")
	anthropicError(w, 529, "overloaded_error", "Overloaded")
}

// anthropicRateLimited writes a 429 rate_limit_error.
func anthropicRateLimited(w http.ResponseWriter, v verdict, cost, tpm int) {
	if v.tooLarge {
		anthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
			fmt.Sprintf("This request would exceed the rate limit of %d input tokens per minute (it asks for %d).", tpm, cost))
		return
	}
	anthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
		fmt.Sprintf("This request would exceed your organization's rate limit of %s per minute. Please try again in %s.", v.reason, FormatReset(v.retryAfter)))
}

// serveAnthropicStream writes a's answer as Anthropic's events, at the
// latency model's pace.
func (s *Server) serveAnthropicStream(w http.ResponseWriter, r *http.Request, a *answer) {
	aa := a.anthropic
	c := &s.cfg
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.sst.streams.Add(1)
	sw := &sseWriter{streamPace: streamPace{s: s, ctx: r.Context()}, w: w, r: r, rc: http.NewResponseController(w)}
	defer sw.stop()
	resp := aa.resp
	if !sw.wait(c.Latency + time.Duration(a.promptTokens)*c.PerPromptToken) {
		return
	}
	start := *resp
	start.Content, start.StopReason, start.StopSequence = []anthropicBlock{}, nil, nil
	start.Usage = anthropicUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: 1}
	if !sw.send("message_start", map[string]any{"type": "message_start", "message": start}) {
		return
	}
	for i := range resp.Content {
		if !s.streamBlock(sw, i, &resp.Content[i], aa.stream) {
			return
		}
	}
	if !sw.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": resp.StopReason, "stop_sequence": resp.StopSequence},
		"usage": map[string]int{"output_tokens": resp.Usage.OutputTokens}}) {
		return
	}
	if !sw.send("message_stop", map[string]string{"type": "message_stop"}) {
		return
	}
	s.st.ok.Add(1)
	s.st.promptTokens.Add(int64(a.promptTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
}

// sseWriter writes one streamed answer's events, paced by its timer.
type sseWriter struct {
	streamPace
	w  http.ResponseWriter
	r  *http.Request
	rc *http.ResponseController
}

// send writes and flushes one event; false when the client is gone.
func (sw *sseWriter) send(event string, data any) bool {
	b, _ := json.Marshal(data) // strings, numbers and raw JSON only
	_, err := fmt.Fprintf(sw.w, "event: %s\ndata: %s\n\n", event, b)
	if err == nil {
		err = sw.rc.Flush()
	}
	if err != nil {
		sw.gone()
		return false
	}
	return true
}

// streamBlock streams content block i: its start, its deltas (text in the
// answer's words, a tool call's input in pieces) with the stream's fault,
// and its stop. false: the stream ended.
func (s *Server) streamBlock(sw *sseWriter, i int, b *anthropicBlock, sa *streamAnswer) bool {
	type delta struct {
		Type        string `json:"type"`
		Text        string `json:"text,omitempty"`
		PartialJSON string `json:"partial_json,omitempty"`
	}
	var pieces []string
	var first any
	switch b.Type {
	case "tool_use":
		first = map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}
		js := string(b.Input)
		for len(js) > 0 { // Anthropic sends the input in pieces
			n := min(len(js), 12)
			pieces, js = append(pieces, js[:n]), js[n:]
		}
	default:
		first = map[string]any{"type": "text", "text": ""}
		pieces = sa.words
	}
	if !sw.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": first}) {
		return false
	}
	if i == 0 && !sw.send("ping", map[string]string{"type": "ping"}) {
		return false
	}
	for k, p := range pieces {
		if k > 0 && !sw.wait(time.Duration(Tokens(p))*s.cfg.PerToken) {
			return false
		}
		if sa.fault != 0 && k == sa.at {
			s.anthropicStreamFault(sw.w, sw.r, sa.fault, sw.rc)
			return false
		}
		if p == "" {
			continue
		}
		d := delta{Type: "text_delta", Text: p}
		if b.Type == "tool_use" {
			d = delta{Type: "input_json_delta", PartialJSON: p}
		}
		if !sw.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}) {
			return false
		}
	}
	return sw.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// anthropicStreamFault injects a mid-stream fault: a cut or a stall as on
// the OpenAI endpoints; the malformed fault sends an event whose data is
// not JSON.
func (s *Server) anthropicStreamFault(w http.ResponseWriter, r *http.Request, f int, rc *http.ResponseController) {
	if f == faultMalformed {
		s.sst.malformed.Add(1)
		s.cfg.Logger.Debug("fault: malformed event", "path", r.URL.Path)
		_, _ = w.Write([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"bro\n\n"))
		_ = rc.Flush()
		return
	}
	s.fault(w, r, f, rc)
}
