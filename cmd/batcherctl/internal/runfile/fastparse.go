package runfile

import (
	"unicode/utf8"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// fastParse reads the common shape of a request line without protojson's
// reflection: string fields, enums by name, chat messages, max_tokens and
// stop, metadata. Parsing with protojson was a third of batcherctl's CPU
// in a run. ok is false for anything else (other fields, numbers where a
// name may stand, \u escapes, null, duplicate keys, bad JSON): ParseLine
// then asks protojson, which reads or rejects it. For every line fastParse
// accepts, protojson reads the same request (FuzzFastParse checks it).
func fastParse(line []byte) (_ *batcherv1.Request, ok bool) {
	s := scanner{b: line, src: string(line)}
	req := new(batcherv1.Request)
	var seen uint32
	ok = s.object(func(key string) bool {
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
	s.ws()
	return req, s.i == len(s.b)
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
func requestField(key string) (uint32, fieldParser) {
	switch key {
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
	return s.object(func(key string) bool {
		if key != "messages" || seen {
			return false
		}
		seen = true
		return s.array(func() bool {
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
	return s.object(func(key string) bool {
		switch {
		case (key == "maxTokens" || key == "max_tokens") && !sawMax:
			sawMax = true
			var n int32
			if !s.int32(&n) {
				return false
			}
			p.MaxTokens = &n
			return true
		case key == "stop" && !sawStop:
			sawStop = true
			p.Stop = []string{}
			return s.array(func() bool {
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
	return s.object(func(key string) bool {
		if _, dup := md[key]; dup {
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

// scanner reads JSON from b at i. Each method skips the whitespace before
// what it reads and returns false when that is not there or not simple.
//
// src is b as one string: strings without escapes are slices of it, so
// that a line costs one allocation for all its strings (they keep the
// line's memory alive as long as the request lives, which is the same).
type scanner struct {
	b   []byte
	src string
	i   int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling member for each key with the
// scanner before the value, which member reads.
func (s *scanner) object(member func(key string) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		var key string
		if !s.str(&key) || !s.next(':') || !member(key) {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next('}')
	}
}

// array reads [elem, ...], calling elem for each element.
func (s *scanner) array(elem func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next(']')
	}
}

// onlyStrings reads an object whose members are all among keys, each at
// most once, each a string, into the dst of the same index.
func (s *scanner) onlyStrings(keys []string, dst ...*string) bool {
	var seen uint8
	return s.object(func(key string) bool {
		for i, k := range keys {
			if k == key {
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
	if !s.next('"') {
		return false
	}
	start := s.i
	var buf []byte // only when there are escapes
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			end := s.i
			s.i++
			if buf == nil {
				v := s.src[start:end]
				if !utf8.ValidString(v) {
					return false
				}
				*dst = v
				return true
			}
			raw := append(buf, s.b[start:end]...)
			if !utf8.Valid(raw) {
				return false
			}
			*dst = string(raw)
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return false
			}
			var r byte
			switch s.b[s.i+1] {
			case '"', '\\', '/':
				r = s.b[s.i+1]
			case 'n':
				r = '\n'
			case 't':
				r = '\t'
			case 'r':
				r = '\r'
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			default:
				return false // \u and bad escapes: protojson's
			}
			buf = append(append(buf, s.b[start:s.i]...), r)
			s.i += 2
			start = s.i
		default:
			s.i++
		}
	}
	return false
}

// int32 reads an integer literal (no fraction, exponent or quotes) that
// fits an int32.
func (s *scanner) int32(dst *int32) bool {
	s.ws()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var v int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + int64(s.b[s.i]-'0')
		if v > 1<<31 {
			return false
		}
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return false
		}
	}
	if neg {
		v = -v
	}
	if v > 1<<31-1 || v < -1<<31 {
		return false
	}
	*dst = int32(v)
	return true
}
