package openai

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A plain chat call's body (a model, messages of a role and a text, and
// the common generation parameters) is most of what the backend encodes,
// one a streamed chat. json.Marshal encodes it by reflection, field by
// field, and copies the result out of its buffer; appendPlainChat writes
// the same bytes in one pass into one buffer of about the right size.
// It gives up (ok false) on any other body, and the caller then encodes
// it with json.Marshal, so what is sent never depends on which of the two
// wrote it (TestAppendPlainChat and FuzzAppendPlainChat hold them to the
// same bytes).

// appendPlainChat appends r's JSON encoding to dst, as json.Marshal
// encodes it, followed by `"stream":true,"stream_options":
// {"include_usage":true}` when stream is set (streamChatRequest's), and
// reports whether it could: r holds no rich field (richchat.go), no extra
// body, and only messages of a role and a string, and its temperature and
// top_p are numbers json.Marshal writes without an exponent.
func appendPlainChat(dst []byte, r *chatRequest, stream bool) ([]byte, bool) {
	if !plainChat(r) {
		return dst, false
	}
	dst = slices.Grow(dst, plainChatSize(r))
	start := len(dst)
	dst = append(dst, `{"model":`...)
	dst = appendJSONString(dst, r.Model)
	dst = append(dst, `,"messages":`...)
	if r.Messages == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.Messages {
			m := &r.Messages[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"role":`...)
			dst = appendJSONString(dst, m.Role)
			dst = append(dst, `,"content":`...)
			dst = appendJSONString(dst, m.Content.(string)) // plainChat checked it
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if r.MaxTokens != 0 {
		dst = append(dst, `,"max_tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.MaxTokens), 10)
	}
	if r.MaxCompletionTokens != 0 {
		dst = append(dst, `,"max_completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.MaxCompletionTokens), 10)
	}
	var ok bool
	if r.Temperature != nil {
		dst = append(dst, `,"temperature":`...)
		if dst, ok = appendJSONFloat32(dst, *r.Temperature); !ok {
			return dst[:start], false
		}
	}
	if r.TopP != nil {
		dst = append(dst, `,"top_p":`...)
		if dst, ok = appendJSONFloat32(dst, *r.TopP); !ok {
			return dst[:start], false
		}
	}
	if len(r.Stop) > 0 {
		dst = append(dst, `,"stop":[`...)
		for i, s := range r.Stop {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, s)
		}
		dst = append(dst, ']')
	}
	if r.Seed != nil {
		dst = append(dst, `,"seed":`...)
		dst = strconv.AppendInt(dst, *r.Seed, 10)
	}
	if stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(dst, '}'), true
}

// plainChat reports whether r is a body appendPlainChat writes: none of
// the rich fields, no extra body, and messages of a role and a string only.
func plainChat(r *chatRequest) bool {
	if r.ResponseFormat != nil || r.Tools != nil || r.ToolChoice != nil || r.ParallelToolCalls != nil ||
		r.PresencePenalty != nil || r.FrequencyPenalty != nil || r.N != 0 || r.LogitBias != nil ||
		r.Logprobs || r.TopLogprobs != nil || r.User != "" || r.ReasoningEffort != "" || r.extra != nil {
		return false
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		if _, ok := m.Content.(string); !ok || m.Name != "" || m.ToolCalls != nil || m.ToolCallID != "" {
			return false
		}
	}
	return true
}

// plainChatSize is about the size of r's encoding (r plain), so that
// appendPlainChat's buffer grows at most once.
func plainChatSize(r *chatRequest) int {
	n := 160 + len(r.Model) + 16*len(r.Stop)
	for i := range r.Messages {
		m := &r.Messages[i]
		n += 32 + len(m.Role) + len(m.Content.(string))
	}
	for _, s := range r.Stop {
		n += len(s)
	}
	return n + n/8 // room for escapes
}

// appendJSONFloat32 appends f as json.Marshal encodes a float32, and
// reports whether it could: not for NaN and infinities (which json.Marshal
// refuses) nor for the magnitudes it writes with an exponent.
func appendJSONFloat32(dst []byte, f float32) ([]byte, bool) {
	f64 := float64(f)
	if math.IsInf(f64, 0) || math.IsNaN(f64) {
		return dst, false
	}
	if abs := float32(math.Abs(f64)); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return dst, false
	}
	return strconv.AppendFloat(dst, f64, 'f', -1, 32), true
}

// appendJSONString appends s as a JSON string, escaped as json.Marshal
// escapes it: '"' and '\\' with a backslash, \b \f \n \r \t short, other
// control characters and <, >, & as \u00XX, U+2028 and U+2029 as \u2028
// and \u2029, and each byte that is not UTF-8 as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe(b) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe reports whether json.Marshal writes the ASCII byte b as it is.
func jsonSafe(b byte) bool {
	return b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
}
