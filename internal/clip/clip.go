// Package clip keeps caller-controlled strings short where they are quoted
// back in messages: errors, rejections, logs. The core and the server use
// the one limit, so a name is clipped the same wherever it shows.
package clip

// MaxBytes is how much of a string a message quotes.
const MaxBytes = 64

// String returns s, or its first MaxBytes bytes and "..." when it is
// longer. It never splits a UTF-8 sequence.
func String(s string) string {
	if len(s) <= MaxBytes {
		return s
	}
	n := MaxBytes
	for n > 0 && s[n]&0xC0 == 0x80 { // a continuation byte: back up to the rune's start
		n--
	}
	return s[:n] + "..."
}
