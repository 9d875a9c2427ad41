package batcher

import (
	"unicode"
	"unicode/utf8"
)

// CheckID is the one rule on an id a caller names its request by, which
// every door applies: a request's id (Request.ID, at most MaxIDBytes, the
// core checks it) and a job item's custom id (at most the jobs' bound,
// jobs.MaxCustomIDBytes, on a batch file's custom_id and a CreateJob
// item's id alike). An id is printable text: valid UTF-8 without control
// characters (C0, DEL, C1), the line and paragraph separators U+2028
// and U+2029, or the bidirectional embeddings, overrides and isolates
// (U+202A-U+202E, U+2066-U+2069), which would break or forge a log line,
// a JSONL line or a terminal's output (an override shows a line's text
// reordered; the marks U+200E and U+200F, which reorder nothing, pass). Spaces and other printable characters, non-ASCII
// included, are allowed, so the custom_ids of real OpenAI batch files
// (free strings there) pass. Whether an empty id is allowed is the door's
// to say (Submit assigns one). field names the id as the door's caller
// sent it ("id", "custom_id"). It returns a *ValidationError naming the
// field and the limit, or nil.
func CheckID(field, id string, maxBytes int) *ValidationError {
	if len(id) > maxBytes {
		return invalid(field, "must be at most %d bytes, got %d", maxBytes, len(id))
	}
	for i := 0; i < len(id); {
		c := id[i]
		if c >= 0x20 && c < 0x7f { // printable ASCII: the common case
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(id[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return invalid(field, "must be printable UTF-8 text of at most %d bytes, got invalid UTF-8 at byte %d", maxBytes, i)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || isBidiControl(r):
			return invalid(field, "must be printable text of at most %d bytes, without control characters: got %U at byte %d", maxBytes, r, i)
		}
		i += size
	}
	return nil
}

// isBidiControl reports whether r opens or closes a bidirectional
// embedding, override or isolate (U+202A-U+202E, U+2066-U+2069).
func isBidiControl(r rune) bool {
	return r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069'
}
