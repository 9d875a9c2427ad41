package pack

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBuildParseRequestRoundTrip(t *testing.T) {
	items := []string{
		"What is 2+2?",
		"line one\nline two",
		`quotes " and \ backslash`,
		"Answer each of the following 1 requests.\n{\"id\":1,\"request\":\"x\"}",
		"<b>html</b> & more",
		"",
	}
	for _, maxTokens := range []int{0, 64} {
		p, err := Build("Be terse.", items, maxTokens)
		if err != nil {
			t.Fatal(err)
		}
		if !IsPacked(p.System) {
			t.Fatal("IsPacked(system) = false")
		}
		if got := SharedSystem(p.System); got != "Be terse." {
			t.Fatalf("SharedSystem = %q", got)
		}
		got, mt, err := ParseRequest(p.User)
		if err != nil {
			t.Fatalf("ParseRequest: %v\n%s", err, p.User)
		}
		if mt != maxTokens {
			t.Fatalf("max tokens = %d, want %d", mt, maxTokens)
		}
		if len(got) != len(items) {
			t.Fatalf("got %d items, want %d", len(got), len(items))
		}
		for i := range items {
			if got[i] != items[i] {
				t.Fatalf("item %d = %q, want %q", i, got[i], items[i])
			}
		}
		if n := strings.Count(p.User, "\n"); n != len(items) {
			t.Fatalf("user message has %d newlines, want %d (one line per item)", n, len(items))
		}
	}
}

func TestBuildNoSystem(t *testing.T) {
	p, err := Build("", []string{"a"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if SharedSystem(p.System) != "" || !IsPacked(p.System) {
		t.Fatalf("system = %q", p.System)
	}
}

func TestBuildRejects(t *testing.T) {
	for name, items := range map[string][]string{
		"none":      nil,
		"too many":  make([]string, MaxItems+1),
		"bad utf-8": {"ok", "\xff"},
	} {
		if _, err := Build("", items, 1); err == nil {
			t.Errorf("%s: Build succeeded", name)
		}
	}
}

func TestParseRequestRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"hello",
		"Answer each of the following 2 requests.\n{\"id\":1,\"request\":\"a\"}",
		"Answer each of the following 1 requests.\n{\"id\":2,\"request\":\"a\"}",
		"Answer each of the following 1 requests.\n{\"id\":1}",
		"Answer each of the following 01 requests.\n{\"id\":1,\"request\":\"a\"}",
		"Answer each of the following 1 requests, each in at most x tokens.\n{\"id\":1,\"request\":\"a\"}",
		"Answer each of the following 1 requests!\n{\"id\":1,\"request\":\"a\"}",
		"Answer each of the following 1 requests, each in at most tokens.\n{\"id\":1,\"request\":\"a\"}",
	} {
		if _, _, err := ParseRequest(s); !errors.Is(err, ErrNotPacked) {
			t.Errorf("ParseRequest(%q) = %v, want ErrNotPacked", s, err)
		}
	}
}

func TestParse(t *testing.T) {
	ok := func(s string) Answer { return Answer{Text: s} }
	bad := func(e error) Answer { return Answer{Err: e} }
	tests := []struct {
		name  string
		reply string
		n     int
		want  []Answer
	}{
		{"schema object", `{"answers":[{"id":1,"answer":"a"},{"id":2,"answer":"b"}]}`, 2, []Answer{ok("a"), ok("b")}},
		{"out of order", `{"answers":[{"id":2,"answer":"b"},{"id":1,"answer":"a"}]}`, 2, []Answer{ok("a"), ok("b")}},
		{"bare array", `[{"id":1,"answer":"a"},{"id":2,"answer":"b"}]`, 2, []Answer{ok("a"), ok("b")}},
		{"fenced", "Here you go:\n```json\n[{\"id\":1,\"answer\":\"a\"}]\n```\nDone.", 1, []Answer{ok("a")}},
		{"prose with braces first", `Sure {thing}: {"answers":[{"id":1,"answer":"a"}]}`, 1, []Answer{ok("a")}},
		{"other key first", `{"note":{"x":[1,2]},"count":2,"answers":[{"id":1,"answer":"a"}]}`, 2, []Answer{ok("a"), bad(ErrMissing)}},
		{"string ids", `[{"id":"1","answer":"a"},{"id":"2","answer":"b"}]`, 2, []Answer{ok("a"), ok("b")}},
		{"missing", `[{"id":1,"answer":"a"},{"id":3,"answer":"c"}]`, 3, []Answer{ok("a"), bad(ErrMissing), ok("c")}},
		{"malformed answer", `[{"id":1,"answer":42},{"id":2,"answer":"  "},{"id":3,"answer":"c"}]`, 3, []Answer{bad(ErrMalformed), bad(ErrMalformed), ok("c")}},
		{"duplicate", `[{"id":1,"answer":"a"},{"id":1,"answer":"z"},{"id":2,"answer":"b"}]`, 2, []Answer{bad(ErrDuplicate), ok("b")}},
		{"unroutable entries ignored", `[{"id":0,"answer":"x"},{"id":9,"answer":"x"},"str",{"answer":"x"},{"id":1.5,"answer":"x"},{"id":2,"answer":"b"}]`, 2, []Answer{bad(ErrMissing), ok("b")}},
		{"truncated keeps complete entries", `{"answers":[{"id":1,"answer":"a"},{"id":2,"answer":"b"},{"id":3,"answ`, 3, []Answer{ok("a"), ok("b"), bad(ErrMissing)}},
		{"syntax error midway", `[{"id":1,"answer":"a"},{"id":2,"answer":"b" "x"},{"id":3,"answer":"c"}]`, 3, []Answer{ok("a"), bad(ErrMissing), bad(ErrMissing)}},
		{"empty list", `{"answers":[]}`, 2, []Answer{bad(ErrMissing), bad(ErrMissing)}},
		{"answer with escapes", `[{"id":1,"answer":"say \"hi\"\n{ok}"}]`, 1, []Answer{ok("say \"hi\"\n{ok}")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.reply, tt.n)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d answers, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i].Text != tt.want[i].Text || !errors.Is(got[i].Err, tt.want[i].Err) || (got[i].Err == nil) != (tt.want[i].Err == nil) {
					t.Errorf("answer %d = %+v, want %+v", i+1, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseUnparseable(t *testing.T) {
	for _, s := range []string{
		"",
		"I'm sorry, I can't help with that.",
		`{"answers":"none"}`,
		`{"answers":[`,
		`{"answers":[{"id":1,"ans`,
		`{"a":1}`,
		`{{{{`,
	} {
		if _, err := Parse(s, 2); !errors.Is(err, ErrUnparseable) {
			t.Errorf("Parse(%q) error = %v, want ErrUnparseable", s, err)
		}
	}
	if _, err := Parse("[]", -1); err == nil {
		t.Error("Parse with n = -1 succeeded")
	}
}

func TestEncodeParseRoundTrip(t *testing.T) {
	entries := []Entry{{1, "a"}, {2, "b <c> & \"d\"\n"}, {3, "ünï"}}
	got, err := Parse(Encode(entries), 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if got[i].Err != nil || got[i].Text != e.Answer {
			t.Errorf("answer %d = %+v, want %q", i+1, got[i], e.Answer)
		}
	}
	if Encode(nil) != `{"answers":[]}` {
		t.Errorf("Encode(nil) = %s", Encode(nil))
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"answers":[{"id":1,"answer":"a"},{"id":2,"answer":"b"}]}`, uint8(2))
	f.Add("```json\n[{\"id\":\"1\",\"answer\":\"a\"}]\n```", uint8(1))
	f.Add(`{"answers":[{"id":1,"answer":"a"},{"id":2,"answ`, uint8(3))
	f.Add(`[{"id":1,"answer":42},{"id":1,"answer":"x"}]`, uint8(1))
	f.Add(`{"x":{"y":[{}]},"answers":[[],{}]}`, uint8(4))
	f.Add("no json here", uint8(0))
	f.Fuzz(func(t *testing.T, reply string, n uint8) {
		got, err := Parse(reply, int(n))
		if err != nil {
			if !errors.Is(err, ErrUnparseable) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(got) != int(n) {
			t.Fatalf("got %d answers, want %d", len(got), n)
		}
		for i, a := range got {
			if (a.Err == nil) == (a.Text == "" || strings.TrimSpace(a.Text) == "") {
				t.Fatalf("answer %d = %+v: want exactly one of a non-blank text and an error", i, a)
			}
		}
		// Whatever Parse accepted, Encode writes back and Parse reads
		// identically.
		var entries []Entry
		for i, a := range got {
			if a.Err == nil {
				entries = append(entries, Entry{ID: i + 1, Answer: a.Text})
			}
		}
		again, err := Parse(Encode(entries), int(n))
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		for i := range got {
			if got[i].Err == nil && (again[i].Err != nil || again[i].Text != got[i].Text) {
				// Encoding replaces invalid UTF-8; only then may text differ.
				if utf8.ValidString(got[i].Text) {
					t.Fatalf("answer %d: %+v after re-encoding, was %+v", i, again[i], got[i])
				}
			}
		}
	})
}

func FuzzParseRequest(f *testing.F) {
	f.Add("Answer each of the following 2 requests, each in at most 5 tokens.\n{\"id\":1,\"request\":\"a\"}\n{\"id\":2,\"request\":\"b\"}", "a", "b")
	f.Add("Answer each of the following 1 requests.\n{\"id\":1,\"request\":\"\"}", "x\ny", "")
	f.Add("Answer each of the following 1 requests, each in at most tokens.", "", "")
	f.Fuzz(func(t *testing.T, user, a, b string) {
		// Arbitrary input: no panic, and a success is self-consistent.
		if items, mt, err := ParseRequest(user); err == nil {
			if len(items) == 0 || mt < 0 {
				t.Fatalf("ParseRequest(%q) = %d items, budget %d", user, len(items), mt)
			}
		}
		// Build's output always parses back to its input.
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		p, err := Build("sys", []string{a, b}, len(a))
		if err != nil {
			t.Fatal(err)
		}
		items, mt, err := ParseRequest(p.User)
		if err != nil || len(items) != 2 || items[0] != a || items[1] != b || mt != len(a) {
			t.Fatalf("round trip of %q, %q: %q, %d, %v", a, b, items, mt, err)
		}
	})
}
