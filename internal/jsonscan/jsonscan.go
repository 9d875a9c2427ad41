// Package jsonscan reads a JSON text of a known shape in one pass, without
// reflection and without allocating: the callers (the OpenAI backend's
// stream chunks, batcherctl's request lines) walk the shape they expect with
// Object and Array, read the values they keep, and give up on anything else,
// handing the text to encoding/json or protojson, which read or reject it.
//
// Every method skips the white space before what it reads and returns false
// when that is not there or is not well formed; after a false the Scanner's
// position is unspecified and the text is to be read another way. What a
// method accepts is always valid JSON, so a caller's fuzz test can hold its
// fast path to the slow one.
//
// RepeatedKey walks a text of any shape for a key that one of its objects
// repeats, which encoding/json would read as its last value.
package jsonscan

import (
	"encoding/json"
	"errors"
	"io"
)

// Scanner reads one JSON text from b at i.
type Scanner struct {
	b []byte
	i int
}

// New returns a Scanner at the start of b.
func New(b []byte) Scanner { return Scanner{b: b} }

// Offset returns where raw, a slice that this Scanner returned, starts in
// the text (so that a caller holding the text as a string can take its
// string from there without a copy).
func (s *Scanner) Offset(raw []byte) int { return cap(s.b) - cap(raw) }

// WS skips white space.
func (s *Scanner) WS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// End skips white space and reports whether the text ends there.
func (s *Scanner) End() bool {
	s.WS()
	return s.i == len(s.b)
}

// Peek returns the next byte after white space, or 0 at the end.
func (s *Scanner) Peek() byte {
	s.WS()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Next consumes c if it comes next.
func (s *Scanner) Next(c byte) bool {
	s.WS()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// Lit consumes the literal l if it comes next.
func (s *Scanner) Lit(l string) bool {
	s.WS()
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// Null consumes null if it comes next.
func (s *Scanner) Null() bool { return s.Lit("null") }

// Object reads {"key": value, ...}, calling member with each key (its bytes
// between the quotes, a slice of the text) once the scan is at its value;
// member reads the value. A key with an escape is refused (the callers
// match keys byte for byte); whether a key is UTF-8 is the caller's to
// check where it keeps a key it does not know.
func (s *Scanner) Object(member func(key []byte) bool) bool {
	if !s.Next('{') {
		return false
	}
	if s.Next('}') {
		return true
	}
	for {
		key, esc, ok := s.RawString()
		if !ok || esc || !s.Next(':') || !member(key) {
			return false
		}
		if s.Next(',') {
			continue
		}
		return s.Next('}')
	}
}

// Array reads [elem, ...], calling elem at each element; elem reads it.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Next('[') {
		return false
	}
	if s.Next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Next(',') {
			continue
		}
		return s.Next(']')
	}
}

// RawString reads a string and returns its bytes between the quotes (a
// slice of the text) and whether they hold an escape. It checks no more
// than that the string ends and holds no control character: escapes are
// the caller's to decode (Unescape) or check, and so is UTF-8.
func (s *Scanner) RawString() (raw []byte, esc, ok bool) {
	if !s.Next('"') {
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

// AppendUnescaped appends raw, the bytes of a string between its quotes,
// to dst with its escapes decoded. It decodes the escapes of one character
// (\" \\ \/ \b \f \n \r \t) and returns false for \u escapes (whose
// surrogate pairs and bad halves are left to a full decoder) and bad ones.
func AppendUnescaped(dst, raw []byte) ([]byte, bool) {
	start := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+1 >= len(raw) {
			return dst, false
		}
		var r byte
		switch raw[i+1] {
		case '"', '\\', '/':
			r = raw[i+1]
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
			return dst, false
		}
		dst = append(append(dst, raw[start:i]...), r)
		i++
		start = i + 1
	}
	return append(dst, raw[start:]...), true
}

// Int32 reads an integer literal (no fraction, no exponent, no leading
// zero, no quotes) that fits an int32.
func (s *Scanner) Int32() (int32, bool) {
	s.WS()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var v int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + int64(s.b[s.i]-'0')
		if v > 1<<31 {
			return 0, false
		}
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	if neg {
		v = -v
	}
	if v > 1<<31-1 || v < -1<<31 {
		return 0, false
	}
	return int32(v), true
}

// Skip reads one value of any kind, nested at most maxDepth deep, and
// checks that it is well formed (strings with escapes included; bytes that
// are not UTF-8 are let through, as encoding/json lets them through).
func (s *Scanner) Skip(maxDepth int) bool {
	if maxDepth < 0 {
		return false
	}
	switch s.Peek() {
	case '{':
		return s.Object(func([]byte) bool { return s.Skip(maxDepth - 1) })
	case '[':
		return s.Array(func() bool { return s.Skip(maxDepth - 1) })
	case '"':
		raw, esc, ok := s.RawString()
		// Escapes are checked by json.Valid on the string just read.
		return ok && (!esc || json.Valid(s.b[s.i-len(raw)-2:s.i]))
	case 't':
		return s.Lit("true")
	case 'f':
		return s.Lit("false")
	case 'n':
		return s.Null()
	}
	return s.number()
}

// number reads a JSON number.
func (s *Scanner) number() bool {
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

// Position returns the 1-based line and column (in bytes) of b's byte at
// offset (len(b): just past the end; an offset out of range is clamped).
func Position(b []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for _, c := range b[:min(max(int(offset), 0), len(b))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// ErrorPosition returns where in b, the text encoding/json was decoding,
// err (its error) points: the offending byte of a *json.SyntaxError, the
// last byte of the value of a *json.UnmarshalTypeError, just past the end
// of the text for an unexpected end of input. ok is false for any other error.
func ErrorPosition(b []byte, err error) (line, col int, ok bool) {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		at := se.Offset - 1 // the bytes read, the bad one included
		if se.Error() == "unexpected end of JSON input" {
			at = int64(len(b))
		}
		line, col = Position(b, at)
		return line, col, true
	case errors.As(err, &te):
		line, col = Position(b, te.Offset-1) // the bytes read, the value's included
		return line, col, true
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col = Position(b, int64(len(b)))
		return line, col, true
	}
	return 0, 0, false
}
