package runfile

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// appendCompletion appends c in protobuf JSON, as protojson would write it
// (the same fields, names and value forms, so that protojson reads it back
// to an equal message), without protojson's reflection: encoding results
// was a third of batcherctl's CPU time in a run, CPU the service on the
// same machine could use. ok is false when c holds what this encoder does
// not handle (status details, which are Any; a string that is not UTF-8; a
// NaN or infinite embedding value; a duration out of range): the caller
// then uses protojson, which handles or rejects it. TestEncoderKnowsEveryField
// fails when the proto gains a field this encoder does not write.
func appendCompletion(b []byte, c *batcherv1.Completion) (_ []byte, ok bool) {
	start := len(b)
	fail := func() ([]byte, bool) { return b[:start], false }
	w := objectWriter{b: append(b, '{')}
	if !w.str("id", c.GetId()) {
		return fail()
	}
	switch out := c.GetOutput().(type) {
	case *batcherv1.Completion_Text:
		if !w.strAlways("text", out.Text) {
			return fail()
		}
	case *batcherv1.Completion_Embedding:
		w.key("embedding")
		w.b = append(w.b, '{')
		if vs := out.Embedding.GetValues(); len(vs) > 0 {
			w.b = append(w.b, `"values":[`...)
			for i, v := range vs {
				f := float64(v)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					return fail()
				}
				if i > 0 {
					w.b = append(w.b, ',')
				}
				w.b = appendFloat32(w.b, v)
			}
			w.b = append(w.b, ']')
		}
		w.b = append(w.b, '}')
	}
	if fr := c.GetFinishReason(); fr != 0 {
		name, known := batcherv1.FinishReason_name[int32(fr)]
		w.key("finishReason")
		if known {
			w.b = append(w.b, '"')
			w.b = append(w.b, name...)
			w.b = append(w.b, '"')
		} else {
			w.b = strconv.AppendInt(w.b, int64(fr), 10)
		}
	}
	if u := c.GetUsage(); u != nil {
		w.key("usage")
		uw := objectWriter{b: append(w.b, '{')}
		uw.int("promptTokens", u.GetPromptTokens())
		uw.int("completionTokens", u.GetCompletionTokens())
		uw.int("totalTokens", u.GetTotalTokens())
		w.b = append(uw.b, '}')
	}
	if !w.str("batchId", c.GetBatchId()) {
		return fail()
	}
	w.int("batchSize", c.GetBatchSize())
	w.int("attempts", c.GetAttempts())
	if t := c.GetTimings(); t != nil {
		w.key("timings")
		tw := objectWriter{b: append(w.b, '{')}
		if !tw.duration("batchWait", t.GetBatchWait()) || !tw.duration("queued", t.GetQueued()) ||
			!tw.duration("upstream", t.GetUpstream()) || !tw.duration("total", t.GetTotal()) {
			return fail()
		}
		w.b = append(tw.b, '}')
	}
	if e := c.GetError(); e != nil {
		if len(e.GetDetails()) > 0 {
			return fail()
		}
		w.key("error")
		ew := objectWriter{b: append(w.b, '{')}
		ew.int("code", e.GetCode())
		if !ew.str("message", e.GetMessage()) {
			return fail()
		}
		w.b = append(ew.b, '}')
	}
	if !w.str("backend", c.GetBackend()) {
		return fail()
	}
	if md := c.GetMetadata(); len(md) > 0 {
		w.key("metadata")
		mw := objectWriter{b: append(w.b, '{')}
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !utf8.ValidString(k) {
				return fail()
			}
			mw.key(k)
			var ok bool
			if mw.b, ok = appendJSONString(mw.b, md[k]); !ok {
				return fail()
			}
		}
		w.b = append(mw.b, '}')
	}
	if c.GetDeduplicated() {
		w.key("deduplicated")
		w.b = append(w.b, "true"...)
	}
	if c.GetMessage() != nil || len(c.GetChoices()) > 0 {
		return fail() // tool calls, refusals, logprobs: protojson writes them
	}
	if c.GetPartial() {
		w.key("partial")
		w.b = append(w.b, "true"...)
	}
	if !w.duration("timeToFirstToken", c.GetTimeToFirstToken()) {
		return fail()
	}
	if c.GetCached() {
		w.key("cached")
		w.b = append(w.b, "true"...)
	}
	return append(w.b, '}'), true
}

// objectWriter appends the members of a JSON object, commas between them.
type objectWriter struct {
	b    []byte
	some bool
}

// key appends a member's key, which must be valid UTF-8.
func (w *objectWriter) key(k string) {
	if w.some {
		w.b = append(w.b, ',')
	}
	w.some = true
	w.b, _ = appendJSONString(w.b, k)
	w.b = append(w.b, ':')
}

// str appends a string member unless it is empty; false when s is not
// UTF-8.
func (w *objectWriter) str(k, s string) bool {
	if s == "" {
		return true
	}
	return w.strAlways(k, s)
}

func (w *objectWriter) strAlways(k, s string) bool {
	w.key(k)
	var ok bool
	w.b, ok = appendJSONString(w.b, s)
	return ok
}

// int appends an int32 member unless it is zero.
func (w *objectWriter) int(k string, v int32) {
	if v != 0 {
		w.key(k)
		w.b = strconv.AppendInt(w.b, int64(v), 10)
	}
}

// Duration's range, as protojson enforces it.
const (
	maxDurationSeconds = 315576000000
	maxDurationNanos   = 999999999
)

// duration appends a Duration member unless it is unset, as protojson
// writes it: seconds with 0, 3, 6 or 9 fractional digits and "s"; false
// when d is out of range.
func (w *objectWriter) duration(k string, d *durationpb.Duration) bool {
	if d == nil {
		return true
	}
	secs, nanos := d.GetSeconds(), int64(d.GetNanos())
	if secs < -maxDurationSeconds || secs > maxDurationSeconds || nanos < -maxDurationNanos || nanos > maxDurationNanos ||
		(secs > 0 && nanos < 0) || (secs < 0 && nanos > 0) {
		return false
	}
	w.key(k)
	w.b = append(w.b, '"')
	if secs < 0 || nanos < 0 {
		w.b = append(w.b, '-')
		secs, nanos = -secs, -nanos
	}
	w.b = strconv.AppendInt(w.b, secs, 10)
	if nanos != 0 {
		digits, scale := 9, int64(1)
		switch {
		case nanos%1_000_000 == 0:
			digits, scale = 3, 1_000_000
		case nanos%1_000 == 0:
			digits, scale = 6, 1_000
		}
		v := nanos / scale
		var frac [10]byte
		frac[0] = '.'
		for i := digits; i >= 1; i-- {
			frac[i] = byte('0' + v%10)
			v /= 10
		}
		w.b = append(w.b, frac[:digits+1]...)
	}
	w.b = append(w.b, `s"`...)
	return true
}

// appendJSONString appends s as a JSON string; false (and nothing
// appended) when s is not valid UTF-8, which protobuf strings must be.
func appendJSONString(b []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) {
		return b, false
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// appendFloat32 appends v as protojson (and encoding/json) write a float:
// plain digits, an exponent only below 1e-6 or from 1e21, without a
// leading zero in a negative exponent.
func appendFloat32(b []byte, v float32) []byte {
	format := byte('f')
	if abs := float32(math.Abs(float64(v))); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, float64(v), format, -1, 32)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}
