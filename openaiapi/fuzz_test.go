package openaiapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

var fuzzSeeds = []string{
	`{"model":"chat","messages":[{"role":"user","content":"hi"}],"temperature":0.5,"stop":["a","b"],"n":1}`,
	`{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"chat","messages":[{"role":"assistant","content":null}],"max_tokens":9999999999,"service_tier":"flex","metadata":{"k":"v"}}`,
	`{"model":"comp","prompt":["a","b"],"max_tokens":5,"echo":true,"stop":"x"}`,
	`{"model":"comp","prompt":[[1,2],[3]],"suffix":"s"}`,
	`{"model":"embed","input":"x","encoding_format":"base64","dimensions":2}`,
	`{"model":"embed","input":[1,2,3]}`,
	`{"model":"embed","input":["a",{"b":1}]}`,
	`{"model":1}`, `[]`, `null`, `{"temperature":1e400}`, `{"a":` + "[[[[[[[[[[" + `}`,
	"{\"model\":\"chat\",\n\"messages\":[}", `{"top_p":-1e39}`, `"\u0000"`, ``,
	`{"model":"chat","messages":[{"role":"user","content":"a","content":"b"}]}`,
	`{"model":"embed","input":"x","\u0069nput":"y"}`, `{"model":"comp","prompt":"x","stop":{"a":1,"a":2}}`,
}

// FuzzDecode: the request decoders and their translation into core
// requests never panic, answer every failure with a 400 (or 413), accept
// no body whose object repeats a key, and turn what they accept into
// requests within the limits.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		for op := range 3 {
			f.Add(uint8(op), []byte(s), "")
		}
	}
	f.Add(uint8(0), []byte(fuzzSeeds[0]), "urgent")
	f.Add(uint8(0), []byte(fuzzSeeds[0]), "1e9")
	cfg, err := newConfig([]Option{WithMaxInputs(16), WithMaxJSONDepth(8)})
	if err != nil {
		f.Fatal(err)
	}
	h := &Handler{cfg: cfg}
	f.Fuzz(func(t *testing.T, op uint8, body []byte, header string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/x", bytes.NewReader(body))
		r.Header.Set(PriorityHeader, header)
		r.Header.Set(TimeoutHeader, header)
		check := func(e *Error) {
			if e != nil && e.Status != http.StatusBadRequest {
				t.Fatalf("status %d for bad input: %v", e.Status, e)
			}
			if e == nil && repeatsAKey(body) {
				t.Fatalf("%q, which repeats a key, accepted", body)
			}
		}
		switch op % 3 {
		case 0:
			var b chatRequest
			e := decode(body, &b, cfg.maxDepth)
			check(e)
			if e == nil {
				req, _, e := h.chatRequest(r, &b)
				check(e)
				if e == nil && (len(req.Input.Messages) == 0 || len(req.Input.Messages) > 256) {
					t.Fatalf("%d messages accepted", len(req.Input.Messages))
				}
			}
		case 1:
			var b completionRequest
			e := decode(body, &b, cfg.maxDepth)
			check(e)
			if e == nil {
				_, reqs, e := h.completionRequests(r, &b)
				check(e)
				if e == nil && (len(reqs) == 0 || len(reqs) > cfg.maxInputs || b.Prompt.tokens) {
					t.Fatalf("%d prompts accepted (tokens %v)", len(reqs), b.Prompt.tokens)
				}
			}
		case 2:
			var b embeddingRequest
			e := decode(body, &b, cfg.maxDepth)
			check(e)
			if e == nil {
				_, reqs, e := h.embeddingRequests(r, &b)
				check(e)
				if e == nil && (len(reqs) == 0 || len(reqs) > cfg.maxInputs || b.Input.tokens) {
					t.Fatalf("%d inputs accepted (tokens %v)", len(reqs), b.Input.tokens)
				}
			}
		}
	})
}

// repeatsAKey reports whether an object of body, valid JSON, holds a key
// twice, by encoding/json's tokens (keys decoded as it decodes them).
func repeatsAKey(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type object struct {
		keys  map[string]bool
		atKey bool
	}
	var stack []*object // nil for an array
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *object
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		if top != nil && top.atKey {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return true
				}
				top.keys[k], top.atKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if n := len(stack); n > 0 && stack[n-1] != nil {
				stack[n-1].atKey = true
			}
			continue
		case json.Delim('{'):
			stack = append(stack, &object{keys: map[string]bool{}, atKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, nil)
			continue
		}
		if top != nil {
			top.atKey = true
		}
	}
}

// FuzzCheckDepth: the depth scan never rejects JSON that nests within the
// limit, and never panics on anything.
func FuzzCheckDepth(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[","b":"\"[[[[[[[[[["}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e := checkDepth(body, 8)
		if e == nil || !json.Valid(body) {
			return
		}
		if d := depthOf(t, body); d <= 8 {
			t.Fatalf("depth %d rejected: %v", d, e)
		}
	})
}

// depthOf measures valid JSON's nesting with the decoder's tokens.
func depthOf(t *testing.T, body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, most := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return most
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			most = max(most, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// FuzzCheckJSONL: the upload check never panics, and accepts exactly the
// files whose every non-blank line is a JSON object.
func FuzzCheckJSONL(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":[2]}\n"))
	f.Add([]byte("{\"a\":1}\r\n\n  \n{}"))
	f.Add([]byte("[1]\n"))
	f.Add([]byte("{\"a\":\n1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkJSONL(bytes.NewReader(data), 64)
		want := true
		lines := 0
		for _, l := range bytes.Split(data, []byte{'\n'}) {
			l = bytes.TrimSpace(l)
			if len(l) == 0 {
				continue
			}
			lines++
			var m map[string]any
			if l[0] != '{' || json.Unmarshal(l, &m) != nil || checkDepth(l, 64) != nil {
				want = false
			}
		}
		if lines == 0 {
			want = false
		}
		if (err == nil) != want {
			t.Fatalf("checkJSONL(%q) = %v, want ok %v", data, err, want)
		}
	})
}

// FuzzChatSurface decodes chat bodies with tools, tool calls, content
// parts, response formats and unknown fields: any body either translates
// (its extra fields then one JSON object) or is a 400, never a panic.
func FuzzChatSurface(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA","detail":"low"}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"w"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`,
		`{"model":"m","messages":[{"role":"user","content":"x","name":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"},"strict":true}},"logprobs":true,"top_logprobs":2,"n":2,"logit_bias":{"1":-100},"user":"u","reasoning_effort":"low","presence_penalty":1,"top_k":3}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required","response_format":{"type":"json_object"}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio"}]}],"tools":[{"type":"custom"}],"tool_choice":{"type":"allowed_tools"}}`,
	} {
		f.Add([]byte(s))
	}
	cfg, err := newConfig(nil)
	if err != nil {
		f.Fatal(err)
	}
	h := &Handler{cfg: cfg}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		var b chatRequest
		if e := decode(body, &b, cfg.maxDepth); e != nil {
			if e.Status != http.StatusBadRequest {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		req, _, e := h.chatRequest(r, &b)
		if e == nil {
			req.MutableChat().Extra, e = extraFields(body)
		}
		if e != nil {
			if e.Status != http.StatusBadRequest {
				t.Fatalf("status %d: %v", e.Status, e)
			}
			return
		}
		if req.ChatOptions().Extra != nil {
			var m map[string]json.RawMessage
			if json.Unmarshal(req.ChatOptions().Extra, &m) != nil || len(m) == 0 {
				t.Fatalf("extra %q is not a JSON object", req.ChatOptions().Extra)
			}
		}
		for _, tl := range req.ChatOptions().Tools {
			if tl.Parameters != nil && !json.Valid(tl.Parameters) {
				t.Fatalf("tool parameters %q", tl.Parameters)
			}
		}
	})
}

// FuzzCacheControl: any Cache-Control header reads as one of the modes,
// without a panic.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"no-cache", "no-store", "max-age=0, no-cache", `private="a,b", no-store`, ",,", "NO-CACHE=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Add("Cache-Control", v)
		if m := cacheMode(h); m > batcher.CacheBypass {
			t.Fatalf("%q: mode %v", v, m)
		}
	})
}

// FuzzFileListQuery: GET /v1/files's query parser never panics, refuses
// with a 400, and what it accepts is within OpenAI's limits.
func FuzzFileListQuery(f *testing.F) {
	for _, s := range []string{"", "limit=10", "limit=0", "limit=10001&order=asc", "order=desc&purpose=batch&after=file-x",
		"purpose=&limit=", "limit=1&limit=2", "a=b", "%zz", "limit=%2B5", "order=ASC", ";", "limit=9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, e := parseFileListQuery(raw)
		if e != nil {
			if e.Status != http.StatusBadRequest || e.Message == "" {
				t.Fatalf("%q: %+v, want a 400 with a message", raw, e)
			}
			return
		}
		if q.limit < 1 || q.limit > MaxFileListLimit || (q.purpose != "" && !slices.Contains(filePurposes, q.purpose)) {
			t.Fatalf("%q accepted as %+v", raw, q)
		}
	})
}
