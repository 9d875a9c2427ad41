package runfile

import (
	"unicode/utf8"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/jsonscan"
)

// fastParse reads the common shape of a request line without protojson's
// reflection: string fields, enums by name, chat messages, max_tokens and
// stop, metadata. Parsing with protojson was a third of batcherctl's CPU
// in a run. ok is false for anything else (other fields, numbers where a
// name may stand, \u escapes, null, duplicate keys, bad JSON): ParseLine
// then asks protojson, which reads or rejects it. For every line fastParse
// accepts, protojson reads the same request (FuzzFastParse checks it).
func fastParse(line []byte) (_ *batcherv1.Request, ok bool) {
	s := scanner{jsonscan.New(line), string(line)}
	req := new(batcherv1.Request)
	var seen uint32
	ok = s.Object(func(key []byte) bool {
		bit, field := requestField(key)
		if bit == 0 || seen&bit != 0 {
			return false // unknown here, or a duplicate
		}
		seen |= bit
		return field(&s, req)
	})
	if !ok {
		return nil, false
	}
	if n := seen & (bitChat | bitCompletion | bitEmbedding); n&(n-1) != 0 {
		return nil, false // two inputs of the oneof
	}
	return req, s.End()
}

// The Request fields fastParse reads, as bits of a seen mask.
const (
	bitID uint32 = 1 << iota
	bitModel
	bitPriority
	bitChat
	bitCompletion
	bitEmbedding
	bitParams
	bitMetadata
	bitTraceparent
	bitTracestate
	bitDedup
)

type fieldParser func(*scanner, *batcherv1.Request) bool

// requestField maps a key (JSON or proto name) to its bit and parser.
func requestField(key []byte) (uint32, fieldParser) {
	switch string(key) {
	case "id":
		return bitID, func(s *scanner, r *batcherv1.Request) bool { return s.str(&r.Id) }
	case "model":
		return bitModel, func(s *scanner, r *batcherv1.Request) bool { return s.str(&r.Model) }
	case "traceparent":
		return bitTraceparent, func(s *scanner, r *batcherv1.Request) bool { return s.str(&r.Traceparent) }
	case "tracestate":
		return bitTracestate, func(s *scanner, r *batcherv1.Request) bool { return s.str(&r.Tracestate) }
	case "priority":
		return bitPriority, func(s *scanner, r *batcherv1.Request) bool {
			var name string
			v, known := int32(0), false
			if s.str(&name) {
				v, known = batcherv1.Priority_value[name]
			}
			r.Priority = batcherv1.Priority(v)
			return known
		}
	case "dedup":
		return bitDedup, func(s *scanner, r *batcherv1.Request) bool {
			var name string
			v, known := int32(0), false
			if s.str(&name) {
				v, known = batcherv1.Dedup_value[name]
			}
			r.Dedup = batcherv1.Dedup(v)
			return known
		}
	case "chat":
		return bitChat, parseChat
	case "completion":
		return bitCompletion, func(s *scanner, r *batcherv1.Request) bool {
			in := new(batcherv1.CompletionInput)
			r.Input = &batcherv1.Request_Completion{Completion: in}
			return s.onlyStrings(promptKeys, &in.Prompt)
		}
	case "embedding":
		return bitEmbedding, func(s *scanner, r *batcherv1.Request) bool {
			in := new(batcherv1.EmbeddingInput)
			r.Input = &batcherv1.Request_Embedding{Embedding: in}
			return s.onlyStrings(textKeys, &in.Text)
		}
	case "params":
		return bitParams, parseParams
	case "metadata":
		return bitMetadata, parseMetadata
	}
	return 0, nil
}

func parseChat(s *scanner, r *batcherv1.Request) bool {
	in := new(batcherv1.ChatInput)
	r.Input = &batcherv1.Request_Chat{Chat: in}
	seen := false
	return s.Object(func(key []byte) bool {
		if string(key) != "messages" || seen {
			return false
		}
		seen = true
		return s.Array(func() bool {
			m := new(batcherv1.ChatMessage)
			in.Messages = append(in.Messages, m)
			return s.onlyStrings(messageKeys, &m.Role, &m.Content)
		})
	})
}

func parseParams(s *scanner, r *batcherv1.Request) bool {
	p := new(batcherv1.GenerationParams)
	r.Params = p
	var sawMax, sawStop bool
	return s.Object(func(key []byte) bool {
		switch {
		case (string(key) == "maxTokens" || string(key) == "max_tokens") && !sawMax:
			sawMax = true
			n, ok := s.Int32()
			if !ok {
				return false
			}
			p.MaxTokens = &n
			return true
		case string(key) == "stop" && !sawStop:
			sawStop = true
			p.Stop = []string{}
			return s.Array(func() bool {
				var v string
				p.Stop = append(p.Stop, "")
				ok := s.str(&v)
				p.Stop[len(p.Stop)-1] = v
				return ok
			})
		}
		return false
	})
}

func parseMetadata(s *scanner, r *batcherv1.Request) bool {
	md := make(map[string]string)
	r.Metadata = md
	return s.Object(func(rawKey []byte) bool {
		key := s.text(rawKey)
		if _, dup := md[key]; dup || !utf8.ValidString(key) {
			return false
		}
		var v string
		if !s.str(&v) {
			return false
		}
		md[key] = v
		return true
	})
}

// scanner reads a request line.
//
// src is the line as one string: strings without escapes are slices of it,
// so that a line costs one allocation for all its strings (they keep the
// line's memory alive as long as the request lives, which is the same).
type scanner struct {
	jsonscan.Scanner
	src string
}

// text returns raw, a slice of the line, as a slice of src.
func (s *scanner) text(raw []byte) string {
	off := s.Offset(raw)
	return s.src[off : off+len(raw)]
}

// onlyStrings reads an object whose members are all among keys, each at
// most once, each a string, into the dst of the same index.
func (s *scanner) onlyStrings(keys []string, dst ...*string) bool {
	var seen uint8
	return s.Object(func(key []byte) bool {
		for i, k := range keys {
			if k == string(key) {
				if seen&(1<<i) != 0 {
					return false
				}
				seen |= 1 << i
				return s.str(dst[i])
			}
		}
		return false
	})
}

// The keys of the inputs' string fields, for onlyStrings.
var (
	promptKeys  = []string{"prompt"}
	textKeys    = []string{"text"}
	messageKeys = []string{"role", "content"}
)

// str reads a string: valid UTF-8, escapes other than \u allowed.
func (s *scanner) str(dst *string) bool {
	raw, esc, ok := s.RawString()
	if !ok {
		return false
	}
	if !esc {
		v := s.text(raw)
		if !utf8.ValidString(v) {
			return false
		}
		*dst = v
		return true
	}
	b, ok := jsonscan.AppendUnescaped(make([]byte, 0, len(raw)), raw)
	if !ok || !utf8.Valid(b) {
		return false // \u and bad escapes: protojson's
	}
	*dst = string(b)
	return true
}
