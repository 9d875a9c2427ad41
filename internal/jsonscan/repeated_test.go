package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/internal/jsonscan"
)

func TestRepeatedKey(t *testing.T) {
	many := func(repeat string) string {
		var b strings.Builder
		b.WriteString(`{"x":{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(`"` + repeat + `":0}}`)
		return b.String()
	}
	for _, c := range []struct{ text, path string }{
		{`{"model":"a","model":"b"}`, "model"},
		{`{"messages":[{"role":"user","content":"a","content":"b"}]}`, "messages[0].content"},
		{`{"messages":[{"role":"user"},{"content":[{"type":"text"},{"text":"a","type":"t","text":"b"}]}]}`, "messages[1].content[1].text"},
		{`[0,{"a":1},{"a":1,"a":2}]`, "[2].a"},
		{`{"k\u0061":1,"ka":2}`, "ka"},
		{`{"a":1,"\u0061":2}`, "a"},
		{"{\"\xff\":1,\"\xfe\":2}", "\ufffd"}, // both decode to U+FFFD
		{`{"":1,"":2}`, ""},
		{`{"b":{"c":1,"c":2},"a":1,"a":2}`, "b.c"}, // the first in the text's order
		{many("k7"), "x.k7"},
		{many("k39"), "x.k39"},
		// None repeats.
		{`{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}`, ""},
		{`{"a":1,"A":2}`, ""},
		{many("k40"), ""},
		{`[]`, ""}, {`"a"`, ""}, {`{}`, ""},
		// Not JSON, or too deep: for the decoder to describe.
		{`{"a":1,"a":}`, ""},
		{`{"a":1,"a"`, ""},
		{`{"a":[[[[[[[[1]]]]]]]],"a":2}`, ""},
	} {
		path, found := jsonscan.RepeatedKey([]byte(c.text), 8)
		if found != (c.path != "" || strings.HasPrefix(c.text, `{"":1`)) || path != c.path {
			t.Errorf("RepeatedKey(%.60s) = %q, %v; want %q", c.text, path, found, c.path)
		}
	}
}

// FuzzRepeatedKey holds RepeatedKey to a walk of encoding/json's tokens:
// in a text that nests at most 16 levels, it finds the first key (in the
// text's order) that an object holds twice as encoding/json decodes keys,
// and names its path; and never panics on anything.
func FuzzRepeatedKey(f *testing.F) {
	for _, s := range append(seeds, `{"a":1,"a":2}`, `{"m":[{"c":1,"\u0063":2}]}`, "{\"\xff\":1,\"\xfe\":2}", `[{"a":{}},{"a":{"b":1,"b":[]}}]`) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		path, found := jsonscan.RepeatedKey([]byte(text), 16)
		want, wantFound, valid := firstRepeat(t, []byte(text))
		if !valid {
			if found {
				t.Fatalf("%q: repeat %q found in a text that is not JSON", text, path)
			}
			return
		}
		if s := jsonscan.New([]byte(text)); !s.Skip(16) {
			return // deeper than 16: RepeatedKey may say either
		}
		if found != wantFound || path != want {
			t.Fatalf("%q: RepeatedKey = %q, %v; want %q, %v", text, path, found, want, wantFound)
		}
	})
}

// firstRepeat walks text's tokens for the first repeated key.
func firstRepeat(t *testing.T, text []byte) (path string, found, valid bool) {
	if !json.Valid(text) {
		return "", false, false
	}
	type frame struct {
		keys   map[string]bool
		object bool
		step   string // the key or index being read
		index  int
		atKey  bool
	}
	var stack []*frame
	render := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.step)
			} else {
				fmt.Fprintf(&b, "[%d]", f.index-1)
			}
		}
		return b.String()
	}
	// before counts a value about to be read in the frame on top.
	before := func() {
		if n := len(stack); n > 0 && !stack[n-1].object {
			stack[n-1].index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false, true
		}
		top := (*frame)(nil)
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		if top != nil && top.object && top.atKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string)
			top.step, top.atKey = k, false
			if top.keys[k] {
				return render(), true, true
			}
			top.keys[k] = true
			continue
		}
		switch tok {
		case json.Delim('{'):
			before()
			if top != nil && top.object {
				top.atKey = true
			}
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, atKey: true})
		case json.Delim('['):
			before()
			if top != nil && top.object {
				top.atKey = true
			}
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			before()
			if top != nil && top.object {
				top.atKey = true
			}
		}
	}
}
