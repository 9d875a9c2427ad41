package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	if got := String("short"); got != "short" {
		t.Fatalf("String(short) = %q", got)
	}
	long := strings.Repeat("x", MaxBytes+10)
	if got := String(long); got != long[:MaxBytes]+"..." {
		t.Fatalf("String(long) = %q", got)
	}
	multi := strings.Repeat("x", MaxBytes-1) + "ü" + "tail" // ü straddles the limit
	if got := String(multi); !utf8.ValidString(got) || got != strings.Repeat("x", MaxBytes-1)+"..." {
		t.Fatalf("String(multi) = %q: split a rune", got)
	}
}
