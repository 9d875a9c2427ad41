package llmsim

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/internal/schema"
)

// toolCall answers a chat call with a tool call when its tool_choice names
// a function, or is "required", or its last user message names one of its
// tools; the arguments are generated from the tool's parameters schema
// (ToolCallMalformedRate and SchemaViolationRate break them).
func (s *Server) toolCall(req *chatRequest, last string) (toolCallWire, bool) {
	var c toolCallWire
	if len(req.Tools) == 0 {
		return c, false
	}
	var mode string
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if len(req.ToolChoice) > 0 && json.Unmarshal(req.ToolChoice, &mode) != nil {
		_ = json.Unmarshal(req.ToolChoice, &named)
	}
	if mode == "none" {
		return c, false
	}
	idx := -1
	for i, t := range req.Tools {
		if named.Function.Name != "" && t.Function.Name == named.Function.Name ||
			named.Function.Name == "" && idx < 0 && strings.Contains(last, t.Function.Name) {
			idx = i
		}
	}
	if idx < 0 && mode == "required" {
		idx = 0
	}
	if idx < 0 || (named.Function.Name == "" && lastRoleIsTool(req)) {
		return c, false
	}
	t := req.Tools[idx].Function
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	h.Write([]byte(last))
	seed := h.Sum64()
	args, err := schema.Instance(nilIfNull(t.Parameters), seed, strings.Fields(last))
	if err != nil {
		args = []byte("{}")
	}
	switch u := s.draw(); {
	case u < s.cfg.ToolCallMalformedRate:
		args = args[:len(args)/2] // not JSON
	case u < s.cfg.ToolCallMalformedRate+s.cfg.SchemaViolationRate:
		args = []byte(`{"llmsim_violation":true}`)
	}
	c.ID, c.Type = "call_"+strconv.FormatUint(seed>>20, 36), "function"
	c.Function.Name, c.Function.Arguments = t.Name, string(args)
	return c, true
}

// checkResponseFormat refuses, as OpenAI does, a response_format of an
// unknown type or whose json_schema.schema is not a valid JSON Schema
// (400 naming the field), and reports whether the request may go on.
func (s *Server) checkResponseFormat(w http.ResponseWriter, req *chatRequest) bool {
	rf := req.ResponseFormat
	if rf == nil {
		return true
	}
	switch rf.Type {
	case "text", "json_object":
	case "json_schema":
		if rf.JSONSchema == nil {
			break
		}
		if sch := nilIfNull(rf.JSONSchema.Schema); sch != nil {
			if err := s.schemas.Check(sch); err != nil {
				badRequest(w, "response_format.json_schema.schema", "Invalid schema for response_format "+strconv.Quote(cutRunes(rf.JSONSchema.Name, 64))+
					": "+cutRunes(err.Error(), 256)+".")
				return false
			}
		}
	default:
		badRequest(w, "response_format", "Invalid response_format type "+strconv.Quote(cutRunes(rf.Type, 32))+".")
		return false
	}
	return true
}

// badToolSchema returns the index of the first tool whose parameters are
// not a valid JSON Schema, and why (the check checkResponseFormat applies
// to a response format's schema); -1 when every one is valid or unset.
func (s *Server) badToolSchema(req *chatRequest) (int, error) {
	for i := range req.Tools {
		if sch := nilIfNull(req.Tools[i].Function.Parameters); sch != nil {
			if err := s.schemas.Check(sch); err != nil {
				return i, err
			}
		}
	}
	return -1, nil
}

// checkTools refuses, as OpenAI does, a tool whose parameters are not a
// valid JSON Schema (400 naming tools[i].function.parameters), and reports
// whether the request may go on.
func (s *Server) checkTools(w http.ResponseWriter, req *chatRequest) bool {
	i, err := s.badToolSchema(req)
	if i < 0 {
		return true
	}
	badRequest(w, "tools["+strconv.Itoa(i)+"].function.parameters", "Invalid schema for function "+
		strconv.Quote(cutRunes(req.Tools[i].Function.Name, 64))+": "+cutRunes(err.Error(), 256)+".")
	return false
}

// structured answers a json_object or json_schema call with JSON:
// {"answer": text}, or an instance of the schema (SchemaViolationRate
// breaks it).
func (s *Server) structured(req *chatRequest, text string) string {
	rf := req.ResponseFormat
	if rf.Type == "json_schema" && rf.JSONSchema != nil {
		if s.draw() < s.cfg.SchemaViolationRate {
			return `{"llmsim_violation":true}`
		}
		h := fnv.New64a()
		h.Write([]byte(text))
		if b, err := schema.Instance(nilIfNull(rf.JSONSchema.Schema), h.Sum64(), strings.Fields(text)); err == nil {
			return string(b)
		}
	}
	b, _ := json.Marshal(map[string]string{"answer": text})
	return string(b)
}

func lastRoleIsTool(req *chatRequest) bool {
	return req.Messages[len(req.Messages)-1].Role == "tool"
}

func nilIfNull(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}
