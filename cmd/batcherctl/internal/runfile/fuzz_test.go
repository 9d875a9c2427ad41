package runfile

import (
	"bytes"
	"strings"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// FuzzParseLine: any line parses or fails with an error naming its line,
// never panics; a parsed request has an id, and survives a round trip
// through protojson unchanged.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"id":"q1","model":"sim-chat","chat":{"messages":[{"role":"user","content":"hi"}]}}`,
		`{"model":"sim-embed","embedding":{"text":"t"},"priority":"PRIORITY_LOW","dedup":"DEDUP_ON"}`,
		`{"model":"m","completion":{"prompt":"p"},"params":{"maxTokens":5,"temperature":0.5,"stop":["\n"]},"timeout":"1.5s","metadata":{"k":"v"}}`,
		`{"model":"m","chat":`, `[]`, `null`, `"x"`, ``, "  \r\n", `{"id":"\u0000"}`, `{"timeout":"-1s"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		req, err := ParseLine(42, []byte(line))
		if err != nil {
			if req != nil || !strings.HasPrefix(err.Error(), "line 42: ") {
				t.Fatalf("ParseLine(%q) = %v, %v: an error must name the line and return no request", line, req, err)
			}
			return
		}
		if req == nil {
			if len(bytes.TrimSpace([]byte(line))) != 0 {
				t.Fatalf("ParseLine(%q): no request and no error for a line that is not blank", line)
			}
			return
		}
		if req.GetId() == "" {
			t.Fatalf("ParseLine(%q): a request without an id", line)
		}
		b, err := protojson.Marshal(req)
		if err != nil {
			t.Fatalf("re-encoding %v: %v", req, err)
		}
		again, err := ParseLine(42, b)
		if err != nil || !proto.Equal(req, again) {
			t.Fatalf("round trip of %q: %v (%v), want %v", line, again, err, req)
		}
	})
}

// FuzzScanResults: any file scans or fails with an error, never panics,
// and Size never goes past the input or ends mid-line.
func FuzzScanResults(f *testing.F) {
	f.Add(`{"line":1,"id":"a","completion":{}}` + "\n" + `{"line":2,"id":"b"`)
	f.Add("\n\n")
	f.Add(`{"id":null}` + "\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ScanResults(strings.NewReader(in))
		if err != nil {
			return
		}
		if s.Size > int64(len(in)) || (s.Size > 0 && in[s.Size-1] != '\n') {
			t.Fatalf("Size %d of %q: past the input or mid-line", s.Size, in)
		}
		if len(s.Done) > s.Lines {
			t.Fatalf("%d ids from %d lines", len(s.Done), s.Lines)
		}
	})
}

// FuzzFastParse: whatever fastParse accepts, protojson reads to the same
// request.
func FuzzFastParse(f *testing.F) {
	for _, s := range []string{
		`{"id":"q1","model":"sim-chat","chat":{"messages":[{"role":"user","content":"hi \"there\"\n\t\\ \/ é"}]}}`,
		`{"model":"m","completion":{"prompt":"p"},"params":{"max_tokens":-5,"stop":["a",""]},"priority":"PRIORITY_HIGH","dedup":"DEDUP_OFF"}`,
		` { "embedding" : { "text" : "" } , "metadata" : { "" : "x", "k": "v" }, "traceparent": "t", "tracestate": "s" } `,
		`{"chat":{"messages":[]},"params":{"maxTokens":2147483647}}`, `{"chat":{},"params":{}}`, `{"params":{"stop":[]}}`,
		`{"params":{"maxTokens":2147483648}}`, `{"params":{"maxTokens":01}}`, `{"params":{"maxTokens":1e2}}`,
		`{"id":"a","id":"b"}`, `{"chat":{},"embedding":{}}`, `{"metadata":{"k":"1","k":"2"}}`, `{"id":"\u0041"}`,
		`{"id":null}`, `{}`, `{} x`, `{"priority":"PRIORITY_SOON"}`, `{"priority":2}`, "{\"id\":\"\xff\"}",
		`{"chat":{"messages":[{"role":"user","role":"x"}]}}`, `{"params":{"maxTokens":-0}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		fast, ok := fastParse([]byte(line))
		if !ok {
			return
		}
		slow := new(batcherv1.Request)
		if err := protojson.Unmarshal([]byte(line), slow); err != nil {
			t.Fatalf("fastParse accepted %q, which protojson rejects: %v", line, err)
		}
		if !proto.Equal(fast, slow) {
			t.Fatalf("%q: fastParse read %v, protojson %v", line, fast, slow)
		}
	})
}
