package runfile

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
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
	w := objectWriter{b: append(b, '{')}
	if !w.str("id", c.GetId()) || !w.output(c) {
		return b[:start], false
	}
	w.finishReason(c.GetFinishReason())
	if u := c.GetUsage(); u != nil {
		w.key("usage")
		uw := objectWriter{b: append(w.b, '{')}
		uw.int("promptTokens", u.GetPromptTokens())
		uw.int("completionTokens", u.GetCompletionTokens())
		uw.int("totalTokens", u.GetTotalTokens())
		w.b = append(uw.b, '}')
	}
	if !w.str("batchId", c.GetBatchId()) {
		return b[:start], false
	}
	w.int("batchSize", c.GetBatchSize())
	w.int("attempts", c.GetAttempts())
	if !w.timings(c.GetTimings()) || !w.completionError(c.GetError()) || !w.str("backend", c.GetBackend()) ||
		!w.metadata(c.GetMetadata()) {
		return b[:start], false
	}
	w.flag("deduplicated", c.GetDeduplicated())
	if c.GetMessage() != nil || len(c.GetChoices()) > 0 {
		return b[:start], false // tool calls, refusals, logprobs: protojson writes them
	}
	w.flag("partial", c.GetPartial())
	if !w.duration("timeToFirstToken", c.GetTimeToFirstToken()) {
		return b[:start], false
	}
	w.flag("cached", c.GetCached())
	return append(w.b, '}'), true
}

// output writes a completion's text or embedding; false when it cannot
// (a NaN or infinite value, text that is not UTF-8).
func (w *objectWriter) output(c *batcherv1.Completion) bool {
	switch out := c.GetOutput().(type) {
	case *batcherv1.Completion_Text:
		return w.strAlways("text", out.Text)
	case *batcherv1.Completion_Embedding:
		w.key("embedding")
		w.b = append(w.b, '{')
		if vs := out.Embedding.GetValues(); len(vs) > 0 {
			w.b = append(w.b, `"values":[`...)
			for i, v := range vs {
				f := float64(v)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					return false
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
	return true
}

// finishReason writes a set finish reason by its name, or its number when
// the name is unknown.
func (w *objectWriter) finishReason(fr batcherv1.FinishReason) {
	if fr == 0 {
		return
	}
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

// timings writes t when set; false when a duration cannot be written.
func (w *objectWriter) timings(t *batcherv1.Timings) bool {
	if t == nil {
		return true
	}
	w.key("timings")
	tw := objectWriter{b: append(w.b, '{')}
	if !tw.duration("batchWait", t.GetBatchWait()) || !tw.duration("queued", t.GetQueued()) ||
		!tw.duration("upstream", t.GetUpstream()) || !tw.duration("total", t.GetTotal()) {
		return false
	}
	w.b = append(tw.b, '}')
	return true
}

// completionError writes e when set; false when it has details (protojson
// writes them) or its message cannot be written.
func (w *objectWriter) completionError(e *statuspb.Status) bool {
	if e == nil {
		return true
	}
	if len(e.GetDetails()) > 0 {
		return false
	}
	w.key("error")
	ew := objectWriter{b: append(w.b, '{')}
	ew.int("code", e.GetCode())
	if !ew.str("message", e.GetMessage()) {
		return false
	}
	w.b = append(ew.b, '}')
	return true
}

// metadata writes md, keys sorted, when it has any; false when a key or
// value is not UTF-8.
func (w *objectWriter) metadata(md map[string]string) bool {
	if len(md) == 0 {
		return true
	}
	w.key("metadata")
	mw := objectWriter{b: append(w.b, '{')}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !utf8.ValidString(k) {
			return false
		}
		mw.key(k)
		var ok bool
		if mw.b, ok = appendJSONString(mw.b, md[k]); !ok {
			return false
		}
	}
	w.b = append(mw.b, '}')
	return true
}

// flag writes name: true when v is set.
func (w *objectWriter) flag(name string, v bool) {
	if v {
		w.key(name)
		w.b = append(w.b, "true"...)
	}
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
