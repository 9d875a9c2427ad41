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
