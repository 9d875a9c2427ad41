package llmsim

import (
	"net/http"
	"strconv"
)

// answer is a computed reply, ready to be served.
type answer struct {
	body             any
	promptTokens     int
	completionTokens int
	cost             int // the call's token cost against the TPM
	inputs           int
	packedItems      int
	stream           *streamAnswer // set for a streamed call (stream.go)
	// anthropic is set for an answer of Anthropic's Messages API, whose
	// errors, headers and stream have Anthropic's shapes (anthropic.go).
	anthropic *anthropicAnswer
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.st.chat.Add(1)
	var req chatRequest
	if !s.begin(w, r, &req) {
		return
	}
	if !s.checkModel(w, req.Model) {
		return
	}
	if len(req.Messages) == 0 {
		badRequest(w, "messages", "'messages' must hold at least one message.")
		return
	}
	if req.N != nil && *req.N != 1 {
		badRequest(w, "n", "llmsim answers n=1 only.")
		return
	}
	if t := req.Temperature; t != nil && (*t < 0 || *t > 2) {
		badRequest(w, "temperature", "Invalid 'temperature': must be 0 to 2, got "+strconv.FormatFloat(*t, 'g', -1, 64)+".")
		return
	}
	if !s.checkResponseFormat(w, &req) || !s.checkTools(w, &req) {
		return
	}
	maxTokens := s.cfg.ReplyTokens
	for _, mt := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if mt != nil {
			if *mt < 1 {
				badRequest(w, "max_tokens", "max_tokens must be at least 1.")
				return
			}
			maxTokens = *mt
		}
	}
	prompt := 3
	var system []string
	last := ""
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, string(m.Content))
		case "user", "assistant", "tool":
		default:
			badRequest(w, "messages["+strconv.Itoa(i)+"].role", "Invalid role "+strconv.Quote(cutRunes(m.Role, 32))+".")
			return
		}
		if m.Role == "user" {
			last = string(m.Content)
		}
		prompt += Tokens(string(m.Content)) + 4
	}
	if last == "" {
		last = string(req.Messages[len(req.Messages)-1].Content)
	}

	var text string
	var cut bool
	a := answer{promptTokens: prompt, cost: prompt + maxTokens}
	if items, budget, err := parsePacked(last); err == nil && isPacked(system) {
		text, cut = s.packedReply(items, budget, maxTokens)
		a.packedItems = len(items)
	} else {
		text, cut = Reply(last, maxTokens, s.cfg.ReplyTokens)
	}
	msg := responseMessage{Role: "assistant", Content: text}
	fr := finish(cut)
	var called *toolCallWire
	if call, ok := s.toolCall(&req, last); ok { // tools.go
		msg.Content, msg.ToolCalls, fr = "", []toolCallWire{call}, "tool_calls"
		text, called = call.Function.Arguments, &call
	} else if rf := req.ResponseFormat; rf != nil && rf.Type != "text" && a.packedItems == 0 {
		// A pack's reply already has the pack's own JSON shape (the
		// packed compiler sends its schema as the response format).
		text = s.structured(&req, text)
		msg.Content = text
	}
	a.completionTokens = Tokens(text)
	a.body = chatResponse{
		ID:      "chatcmpl-sim" + strconv.FormatUint(s.seq.Add(1), 10),
		Object:  "chat.completion",
		Created: s.cfg.Now().Unix(),
		Model:   req.Model,
		Choices: []chatChoice{{Message: msg, FinishReason: fr}},
		Usage:   usage{PromptTokens: a.promptTokens, CompletionTokens: a.completionTokens, TotalTokens: a.promptTokens + a.completionTokens},
	}
	if req.Stream {
		a.stream = s.newStream(chatStream, a.body.(chatResponse).ID, req.Model, text, called, fr, req.StreamOptions)
	}
	s.serve(w, r, &a)
}

func cutReply(text string, maxTokens int) (string, bool) {
	if limit := 4 * maxTokens; len(text) > limit {
		return cutRunes(text, limit), true
	}
	return text, false
}

func finish(cut bool) string {
	if cut {
		return "length"
	}
	return "stop"
}
