package openai

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/batcherhq/batcher/internal/jsonscan"
)

// The chunks of a streamed answer are most of what a streamed call reads:
// one small JSON object a token, almost all of one shape
// (`{"id":…,"object":"chat.completion.chunk",…,"choices":[{"index":0,
// "delta":{"content":"…"},"finish_reason":null}]}`). json.Unmarshal scans
// each one twice (a validity pass, then a reflective decode) and allocates
// for every field it meets; decodeChunk reads that shape in one pass and
// allocates only the text it keeps. It gives up (ok false) on anything
// else, and readStream then decodes the chunk with json.Unmarshal, so what
// a chunk means never depends on which of the two read it
// (FuzzDecodeChunk holds them to the same answer).

// streamChunk is one chunk of a streamed chat or completion answer
// ("chat.completion.chunk", "text_completion"), or an error some servers
// send in the stream.
type streamChunk struct {
	Choices []chunkChoice   `json:"choices"`
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Text         *string    `json:"text"` // completions
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Content   *string         `json:"content"`
	Refusal   *string         `json:"refusal"`
	ToolCalls []chunkToolCall `json:"tool_calls"`
}

type chunkToolCall struct {
	Index    int32  `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// maxChunkDepth bounds the nesting decodeChunk follows in the values it
// skips; deeper chunks go to json.Unmarshal.
const maxChunkDepth = 16

// chunkReader decodes chunks with decodeChunk; its arena is reused from
// chunk to chunk (a chunk is done with before the next is read).
type chunkReader struct {
	ar chunkArena
}

// chunkArena holds what a chunk decodeChunk decodes points to: its first
// choices, the strings its *string fields point to (a delta's content,
// its finish reason) and its usage, so that a chunk costs no allocation
// but its strings' bytes. Strings past the arena's room are boxed on the
// heap, as before.
type chunkArena struct {
	choices [1]chunkChoice
	strs    [4]string
	nstr    int
	usage   wireUsage
}

// str returns a pointer to v: into the arena while it has room (a nil
// arena has none), else to a copy of its own.
func (a *chunkArena) str(v string) *string {
	if a == nil || a.nstr == len(a.strs) {
		p := new(string) // not &v, which would move v to the heap on every call
		*p = v
		return p
	}
	p := &a.strs[a.nstr]
	a.nstr++
	*p = v
	return p
}

// decode decodes data into ch as json.Unmarshal does: by decodeChunk when
// it can, else by json.Unmarshal into a fresh chunk.
func (r *chunkReader) decode(data []byte, ch *streamChunk) error {
	*ch = streamChunk{}
	if decodeChunk(data, ch, &r.ar) {
		return nil
	}
	*ch = streamChunk{}
	return json.Unmarshal(data, ch)
}

// decodeChunk decodes data into ch, which is zero, and reports whether it
// could: data is one JSON object whose "choices" (decoded into ar's
// array while it has room; ar, which may be nil, also holds the strings
// and usage ch points to, until the next call with it) hold only index, delta (content, refusal, a
// null tool_calls and fields that say nothing here), text and
// finish_reason, and whose "usage", if there, is null or holds token
// counts (the last chunk, with stream_options.include_usage) beside fields
// that say nothing here. Anything else (tool calls, an error, a count
// that is not a small integer, a key json.Unmarshal would match
// case-insensitively or twice, malformed JSON) returns false.
func decodeChunk(data []byte, ch *streamChunk, ar *chunkArena) bool {
	var choices []chunkChoice
	if ar != nil {
		ar.nstr, choices = 0, ar.choices[:0]
	}
	s := chunkScan{jsonscan.New(data), data, ar}
	var seen uint8
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			if s.Null() {
				return true
			}
			ch.Choices = choices
			if ch.Choices == nil {
				ch.Choices = []chunkChoice{} // "[]" is an empty slice, as json.Unmarshal makes it
			}
			return s.Array(func() bool {
				ch.Choices = append(ch.Choices, chunkChoice{})
				return s.choice(&ch.Choices[len(ch.Choices)-1])
			})
		case "usage":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			if s.Null() {
				return true
			}
			if s.ar != nil {
				s.ar.usage = wireUsage{}
				ch.Usage = &s.ar.usage
			} else {
				ch.Usage = new(wireUsage)
			}
			return s.usage(ch.Usage)
		}
		return s.other(key, 0)
	})
	return ok && s.End()
}

// chunkScan reads a chunk's parts from data.
type chunkScan struct {
	jsonscan.Scanner
	data []byte
	ar   *chunkArena // what the chunk points to (nil: the heap)
}

// choice reads one element of "choices" into c.
func (s *chunkScan) choice(c *chunkChoice) bool {
	var seen uint8
	once := func(bit uint8) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	return s.Object(func(key []byte) bool {
		switch string(key) {
		case "index":
			n, ok := s.Int32()
			c.Index = int(n)
			return once(1) && ok
		case "delta":
			return once(2) && (s.Null() || s.delta(&c.Delta))
		case "text":
			return once(4) && s.optString(&c.Text)
		case "finish_reason":
			return once(8) && s.optString(&c.FinishReason)
		}
		return s.other(key, 1)
	})
}

// delta reads a choice's delta into d.
func (s *chunkScan) delta(d *chunkDelta) bool {
	var seen uint8
	return s.Object(func(key []byte) bool {
		switch string(key) {
		case "content":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			return s.optString(&d.Content)
		case "refusal":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			return s.optString(&d.Refusal)
		case "tool_calls":
			return s.Null() // tool calls go to json.Unmarshal
		}
		return s.other(key, 2)
	})
}

// usage reads a usage object's token counts into u; its other members
// (total_tokens, the details) say nothing here.
func (s *chunkScan) usage(u *wireUsage) bool {
	var seen uint8
	count := func(bit uint8, p *int64) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		n, ok := s.Int32()
		*p = int64(n)
		return ok
	}
	return s.Object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return count(1, &u.PromptTokens)
		case "completion_tokens":
			return count(2, &u.CompletionTokens)
		}
		return s.other(key, 3)
	})
}

// other skips the value of a key that says nothing here, unless
// json.Unmarshal would take the key for one of the fields at level
// (0 the chunk, 1 a choice, 2 a delta, 3 the usage), as it matches keys
// without regard to case.
func (s *chunkScan) other(key []byte, level int) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false // Unicode case folding: leave it to json.Unmarshal
		}
	}
	for _, f := range chunkFields[level] {
		if asciiEqualFold(key, f) {
			return false
		}
	}
	return s.Skip(maxChunkDepth)
}

// chunkFields are the JSON names of the fields of streamChunk, chunkChoice,
// chunkDelta and wireUsage.
var chunkFields = [4][]string{
	{"choices", "usage", "error"},
	{"index", "delta", "text", "finish_reason"},
	{"content", "refusal", "tool_calls"},
	{"prompt_tokens", "completion_tokens"},
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// optString reads a string or null into *p.
func (s *chunkScan) optString(p **string) bool {
	if s.Null() {
		*p = nil
		return true
	}
	raw, esc, ok := s.RawString()
	if !ok {
		return false
	}
	if !esc && utf8.Valid(raw) {
		*p = s.ar.str(string(raw))
		return true
	}
	// Escapes of one character ("\n" is in most answers) are decoded here;
	// \u escapes and bytes that are not UTF-8 (which json.Unmarshal
	// replaces) go to json.Unmarshal, the one string.
	if b, ok := jsonscan.AppendUnescaped(make([]byte, 0, len(raw)), raw); ok && utf8.Valid(b) {
		*p = s.ar.str(string(b))
		return true
	}
	var v string
	off := s.Offset(raw)
	if json.Unmarshal(s.data[off-1:off+len(raw)+1], &v) != nil {
		return false
	}
	*p = &v
	return true
}
