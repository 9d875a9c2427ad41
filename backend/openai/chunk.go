package openai

import (
	"encoding/json"
	"unicode/utf8"
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

// chunkReader decodes chunks with decodeChunk; its choices array is
// reused from chunk to chunk (a chunk is done with before the next is read).
type chunkReader struct {
	choices [1]chunkChoice
}

// decode decodes data into ch as json.Unmarshal does: by decodeChunk when
// it can, else by json.Unmarshal into a fresh chunk.
func (r *chunkReader) decode(data []byte, ch *streamChunk) error {
	*ch = streamChunk{}
	if decodeChunk(data, ch, r.choices[:0]) {
		return nil
	}
	*ch = streamChunk{}
	return json.Unmarshal(data, ch)
}

// decodeChunk decodes data into ch, which is zero, and reports whether it
// could: data is one JSON object whose "choices" (decoded into choices'
// array while it has room) hold only index, delta (content, refusal, a
// null tool_calls and fields that say nothing here), text and
// finish_reason, and whose "usage", if there, is null or holds token
// counts (the last chunk, with stream_options.include_usage) beside fields
// that say nothing here. Anything else (tool calls, an error, a count
// that is not a small integer, a key json.Unmarshal would match
// case-insensitively or twice, malformed JSON) returns false.
func decodeChunk(data []byte, ch *streamChunk, choices []chunkChoice) bool {
	s := chunkScan{b: data}
	var seen uint8
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			if s.null() {
				return true
			}
			ch.Choices = choices
			if ch.Choices == nil {
				ch.Choices = []chunkChoice{} // "[]" is an empty slice, as json.Unmarshal makes it
			}
			return s.array(func() bool {
				ch.Choices = append(ch.Choices, chunkChoice{})
				return s.choice(&ch.Choices[len(ch.Choices)-1])
			})
		case "usage":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			if s.null() {
				return true
			}
			ch.Usage = new(wireUsage)
			return s.usage(ch.Usage)
		}
		return s.other(key, 0)
	})
	s.ws()
	return ok && s.i == len(s.b)
}

// chunkScan reads one JSON text from b at i.
type chunkScan struct {
	b []byte
	i int
}

func (s *chunkScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *chunkScan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// lit consumes the literal l (after white space) if it comes next.
func (s *chunkScan) lit(l string) bool {
	s.ws()
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

func (s *chunkScan) null() bool { return s.lit("null") }

// object reads an object, calling member with each key once the scan is
// at its value; member consumes the value.
func (s *chunkScan) object(member func(key []byte) bool) bool {
	if !s.lit("{") {
		return false
	}
	if s.lit("}") {
		return true
	}
	for {
		key, esc, ok := s.rawString()
		if !ok || esc || !s.lit(":") || !member(key) {
			return false
		}
		if s.lit("}") {
			return true
		}
		if !s.lit(",") {
			return false
		}
	}
}

// array reads an array, calling elem at each element; elem consumes it.
func (s *chunkScan) array(elem func() bool) bool {
	if !s.lit("[") {
		return false
	}
	if s.lit("]") {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.lit("]") {
			return true
		}
		if !s.lit(",") {
			return false
		}
	}
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
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			return once(1) && s.int(&c.Index)
		case "delta":
			return once(2) && (s.null() || s.delta(&c.Delta))
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
	return s.object(func(key []byte) bool {
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
			return s.null() // tool calls go to json.Unmarshal
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
		var n int
		if !s.int(&n) {
			return false
		}
		*p = int64(n)
		return true
	}
	return s.object(func(key []byte) bool {
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
	return s.skip(0)
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
	if s.null() {
		*p = nil
		return true
	}
	v, ok := s.string()
	if ok {
		*p = &v
	}
	return ok
}

// string reads a string value.
func (s *chunkScan) string() (string, bool) {
	start := s.i
	raw, esc, ok := s.rawString()
	if !ok {
		return "", false
	}
	if !esc && utf8.Valid(raw) {
		return string(raw), true
	}
	// Escapes, or bytes that are not UTF-8 (json.Unmarshal replaces them):
	// json.Unmarshal decodes the one string.
	var v string
	if json.Unmarshal(s.b[start:s.i], &v) != nil {
		return "", false
	}
	return v, true
}

// rawString reads a string (after white space) and returns its bytes
// between the quotes, and whether they hold an escape.
func (s *chunkScan) rawString() (raw []byte, esc, ok bool) {
	if !s.lit(`"`) {
		return nil, false, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], esc, true
		case c == '\\':
			esc = true
			s.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			s.i++
		}
	}
	return nil, false, false
}

// int reads a JSON integer that fits an int32 (no fraction, no exponent).
func (s *chunkScan) int(p *int) bool {
	s.ws()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start, n := s.i, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' && s.i-start < 9 {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || (digits > 1 && s.b[start] == '0') {
		return false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return false
		}
	}
	if neg {
		n = -n
	}
	*p = n
	return true
}

// skip skips one value of any kind, checking it is well formed.
func (s *chunkScan) skip(depth int) bool {
	if depth > maxChunkDepth {
		return false
	}
	switch s.peek() {
	case '{':
		return s.object(func([]byte) bool { return s.skip(depth + 1) })
	case '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case '"':
		raw, esc, ok := s.rawString()
		// Escapes are checked by json.Valid on the string (the quotes and
		// raw, just read).
		return ok && (!esc || json.Valid(s.b[s.i-len(raw)-2:s.i]))
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.null()
	}
	return s.number()
}

// number reads a JSON number.
func (s *chunkScan) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	s.i = i
	return true
}
