package batcher_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/batcherhq/batcher/batcher"
)

// TestCheckID: ids of printable text within the bound pass, spaces,
// punctuation and non-ASCII included (real batch files' custom_ids);
// control characters, line separators, invalid UTF-8 and an id past the
// bound are refused naming the field, the limit and where.
func TestCheckID(t *testing.T) {
	for _, id := range []string{"", "req-1", "doc 12: chunk 4/7", "résumé_#3", "日本語", "\u05d0\u200f-1", "0f8c2e9a-4b1d-4c3e-9a7f-2d6b8e1c5a90", strings.Repeat("x", 40)} {
		if ve := batcher.CheckID("id", id, 40); ve != nil {
			t.Errorf("CheckID(%q) = %v, want nil", id, ve)
		}
	}
	for _, tc := range []struct{ id, want string }{
		{strings.Repeat("x", 41), "id: must be at most 40 bytes, got 41"},
		{"a\x00", "got U+0000 at byte 1"},
		{"a\tb", "got U+0009 at byte 1"},
		{"a\nb", "id: must be printable text of at most 40 bytes, without control characters: got U+000A at byte 1"},
		{"\x7f", "got U+007F at byte 0"},
		{"é\u0085", "got U+0085 at byte 2"},
		{"a\u2029", "got U+2029 at byte 1"},
		{"invoice-\u202egnp.exe", "got U+202E at byte 8"},
		{"a\u2066b", "got U+2066 at byte 1"},
		{"a\xffb", "id: must be printable UTF-8 text of at most 40 bytes, got invalid UTF-8 at byte 1"},
	} {
		ve := batcher.CheckID("id", tc.id, 40)
		if ve == nil || !errors.Is(ve, batcher.ErrInvalid) || !strings.Contains(ve.Error(), tc.want) {
			t.Errorf("CheckID(%q) = %v, want %q", tc.id, ve, tc.want)
		}
	}
}

// FuzzCheckID: an id CheckID passes is within the bound, valid UTF-8 and
// free of control characters and line separators; one it refuses is
// refused naming the field.
func FuzzCheckID(f *testing.F) {
	for _, s := range []string{"", "req-1", "a b", "é", "a\nb", "\x7f", "\xff", "\u2028", "\u0085", "\u202e", "\u200f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		ve := batcher.CheckID("id", id, 32)
		if ve != nil {
			if ve.Field != "id" || !errors.Is(ve, batcher.ErrInvalid) {
				t.Fatalf("CheckID(%q) = %v", id, ve)
			}
			return
		}
		if len(id) > 32 || !utf8.ValidString(id) {
			t.Fatalf("CheckID passed %q", id)
		}
		for _, r := range id {
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069' {
				t.Fatalf("CheckID passed %q, holding %U", id, r)
			}
		}
	})
}
