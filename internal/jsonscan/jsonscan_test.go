package jsonscan_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/batcherhq/batcher/internal/jsonscan"
)

var seeds = []string{
	`{"a":[1,-2.5e-3,0,{"b":[true,false,null]}],"c":"x\"y\\\/\b\f\n\r\t","d":"\ud83d\ude00"}`,
	`[]`, `{}`, ` { "a" : [ 1 , 2 ] } `, `"caf` + "\xe9" + `"`, `2147483647`, `-2147483648`,
	`2147483648`, `-0`, `01`, `1.`, `-`, `1e`, `1e+5`, `"\x"`, `"\u12"`, `"\u12g4"`, `{"a":1,}`,
	`[1,]`, `{"a" 1}`, `{"\u0061":1}`, `[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]`, "\"a\x01\"", `tru`, `nul`,
}

// FuzzSkip: whatever Skip accepts as a whole text is valid JSON.
func FuzzSkip(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s := jsonscan.New([]byte(text))
		if s.Skip(16) && s.End() && !json.Valid([]byte(text)) {
			t.Fatalf("Skip took %q, which json.Valid refuses", text)
		}
	})
}

// FuzzErrorPosition: every error decoding a text into a typed value (a
// batcherctl --tools file) has a position inside the text, or just past
// its end; the position of a syntax error is that of the offending byte,
// the only place where truncating the text keeps the same error kind.
func FuzzErrorPosition(f *testing.F) {
	for _, s := range append(seeds, "[\n  {\"name\": 5}\n]", "[{\"name\": \"a\"}", "[\n\n  }") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var v []struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		b := []byte(text)
		err := json.Unmarshal(b, &v)
		line, col, ok := jsonscan.ErrorPosition(b, err)
		if err == nil {
			if ok {
				t.Fatalf("no error, but a position %d:%d", line, col)
			}
			return
		}
		if !ok {
			return // an error of no position (none from encoding/json today)
		}
		lines := strings.Split(text, "\n")
		if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1])+1 {
			t.Fatalf("%q: error %v at %d:%d, outside the text", text, err, line, col)
		}
	})
}

// TestErrorPosition: the line and column of each kind of error, 1-based,
// in bytes.
func TestErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		text      string
		line, col int
	}{
		{"[\n  {\"name\": \"a\"\n  \"description\": \"b\"}\n]", 3, 3}, // the key after a missing comma
		{"[\n  {\"name\": 5}\n]", 2, 12},                              // a number for a string: the value's last byte
		{"[{\"name\": \"a\"}", 1, 15},                                 // truncated: just past the end
		{"[\n}", 2, 1},
	} {
		var v []struct {
			Name string `json:"name"`
		}
		err := json.Unmarshal([]byte(tc.text), &v)
		line, col, ok := jsonscan.ErrorPosition([]byte(tc.text), err)
		if !ok || line != tc.line || col != tc.col {
			t.Errorf("%q: %v at %d:%d (%v), want %d:%d", tc.text, err, line, col, ok, tc.line, tc.col)
		}
	}
	if _, _, ok := jsonscan.ErrorPosition(nil, fmt.Errorf("other")); ok {
		t.Error("an error not from encoding/json has a position")
	}
}

// FuzzAppendUnescaped: what it decodes, encoding/json decodes the same.
func FuzzAppendUnescaped(f *testing.F) {
	for _, s := range []string{`plain`, `a\"b\\c\/d\be\ff\ng\rh\ti`, `\u0041`, `\x`, `end\`, "caf\xe9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s := jsonscan.New([]byte(`"` + raw + `"`))
		r, _, ok := s.RawString()
		if !ok || !s.End() {
			return
		}
		got, ok := jsonscan.AppendUnescaped(nil, r)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
			t.Fatalf("AppendUnescaped took %q, which encoding/json refuses: %v", raw, err)
		}
		if json.Valid([]byte(`"`+raw+`"`)) && string(got) != want && utf8.Valid(got) {
			t.Fatalf("AppendUnescaped(%q) = %q, encoding/json %q", raw, got, want)
		}
	})
}

// FuzzInt32: what Int32 reads, encoding/json reads to the same int32.
func FuzzInt32(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s := jsonscan.New([]byte(text))
		n, ok := s.Int32()
		if !ok || !s.End() {
			return
		}
		var want int32
		if err := json.Unmarshal([]byte(text), &want); err != nil || want != n {
			t.Fatalf("Int32(%q) = %d, encoding/json %d, %v", text, n, want, err)
		}
	})
}

func TestScanner(t *testing.T) {
	for _, c := range []struct {
		text string
		skip bool
	}{
		{`{"a":[1,-2.5e-3,{"b":[true,false,null]}],"c":"\n\u00e9"}`, true},
		{` [ ] `, true},
		{`"a\x"`, false},
		{`{"a":1,}`, false},
		{`01`, false},
		{strings.Repeat("[", 16) + "1" + strings.Repeat("]", 16), true},
		{strings.Repeat("[", 17) + "1" + strings.Repeat("]", 17), false},
	} {
		s := jsonscan.New([]byte(c.text))
		if got := s.Skip(16) && s.End(); got != c.skip {
			t.Errorf("Skip(%s) = %v, want %v", c.text, got, c.skip)
		}
	}
	for text, want := range map[string]bool{`2147483647`: true, `-2147483648`: true, `2147483648`: false, `1.0`: false, `1e2`: false, `-`: false} {
		s := jsonscan.New([]byte(text))
		if _, ok := s.Int32(); ok != want {
			t.Errorf("Int32(%s) ok = %v, want %v", text, ok, want)
		}
	}
	s := jsonscan.New([]byte(`{"k\u0061":1}`))
	if s.Object(func([]byte) bool { return s.Skip(1) }) {
		t.Error("Object took a key with an escape")
	}
}

// A caller walks the shape it expects and keeps what it reads.
func Example() {
	text := []byte(`{"name":"a\tb","sizes":[1,2],"other":{"x":null}}`)
	s := jsonscan.New(text)
	var name string
	var sizes []int32
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "name":
			raw, _, ok := s.RawString()
			b, ok2 := jsonscan.AppendUnescaped(nil, raw)
			name = string(b)
			return ok && ok2
		case "sizes":
			return s.Array(func() bool {
				n, ok := s.Int32()
				sizes = append(sizes, n)
				return ok
			})
		}
		return s.Skip(8)
	})
	fmt.Printf("%v %q %v\n", ok && s.End(), name, sizes)
	// Output: true "a\tb" [1 2]
}
