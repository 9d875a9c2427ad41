package llmsim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// events splits an SSE body into its data payloads.
func events(body string) []string {
	var out []string
	for _, ev := range strings.Split(body, "\n\n") {
		if d, ok := strings.CutPrefix(ev, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// TestStreamChat: a streamed chat answer is the role chunk, one chunk a
// word, the finish chunk, the usage chunk when asked, then [DONE]; its
// words make the unstreamed answer.
func TestStreamChat(t *testing.T) {
	s, url := start(t, Config{})
	body := msg{"model": "sim-chat", "stream": true, "stream_options": msg{"include_usage": true},
		"messages": []msg{{"role": "user", "content": "stream me please"}}}
	resp, b := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	evs := events(string(b))
	if len(evs) < 5 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events %q", evs)
	}
	var text strings.Builder
	var finish string
	var u *usage
	for i, ev := range evs[:len(evs)-1] {
		var ch struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &ch); err != nil || ch.Object != "chat.completion.chunk" {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		if i == 0 && (len(ch.Choices) != 1 || ch.Choices[0].Delta.Role != "assistant") {
			t.Fatalf("first chunk %q: want the role", ev)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				text.WriteString(*c.Delta.Content)
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if ch.Usage != nil {
			u = ch.Usage
		}
	}
	want, _ := Reply("stream me please", DefaultReplyTokens, DefaultReplyTokens)
	if text.String() != want || finish != "stop" || u == nil || u.CompletionTokens != Tokens(want) {
		t.Fatalf("text %q finish %q usage %+v, want %q", text.String(), finish, u, want)
	}
	if st := s.Stats(); st.Streams != 1 || st.OK != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStreamFaults: each mid-stream fault strikes after the first word.
func TestStreamFaults(t *testing.T) {
	prompt := msg{"model": "sim-completion", "stream": true, "prompt": "a prompt to stream"}
	t.Run("cut", func(t *testing.T) {
		s, url := start(t, Config{StreamCutRate: 1})
		resp, b, err := tryPost(t.Context(), url+"/v1/completions", prompt)
		if err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(b), "[DONE]") {
			t.Fatalf("a cut stream ended with [DONE]: %s", b)
		}
		if !strings.Contains(string(b), `"text_completion"`) || s.Stats().StreamCuts != 1 {
			t.Fatalf("body %q (err %v), stats %+v: want a chunk, then the cut", b, err, s.Stats())
		}
	})
	t.Run("malformed", func(t *testing.T) {
		s, url := start(t, Config{StreamMalformedRate: 1})
		_, b := post(t, url+"/v1/completions", prompt)
		evs := events(string(b))
		if len(evs) < 2 || json.Valid([]byte(evs[len(evs)-1])) || s.Stats().StreamMalformed != 1 {
			t.Fatalf("events %q: want chunks, then one that is not JSON", evs)
		}
	})
	t.Run("refused", func(t *testing.T) {
		if _, err := New(Config{StreamCutRate: 0.6, StreamStallRate: 0.6}); err == nil {
			t.Fatal("stream fault rates over 1 accepted")
		}
	})
}

// streamedCall reads a streamed chat answer's tool-call chunks: the first
// chunk's call header, the arguments' fragments in order, the finish
// reason, and whether any chunk carried content.
type streamedCall struct {
	id, typ, name string
	fragments     []string
	finish        string
	content       bool
	done          bool
}

func readStreamedCall(t *testing.T, body string) streamedCall {
	t.Helper()
	var sc streamedCall
	for i, ev := range events(body) {
		if ev == "[DONE]" {
			sc.done = true
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Role      string  `json:"role"`
					Content   *string `json:"content"`
					ToolCalls []struct {
						Index    *int   `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string  `json:"name"`
							Arguments *string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				sc.content = true
			}
			if c.FinishReason != nil {
				sc.finish = *c.FinishReason
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.Index == nil || *tc.Index != 0 || tc.Function.Arguments == nil {
					t.Fatalf("event %d %q: a tool-call piece without index 0 or arguments", i, ev)
				}
				if i == 0 {
					if c.Delta.Role != "assistant" || *tc.Function.Arguments != "" {
						t.Fatalf("first chunk %q: want the role and the call's header", ev)
					}
					sc.id, sc.typ, sc.name = tc.ID, tc.Type, tc.Function.Name
					continue
				}
				if tc.ID != "" || tc.Function.Name != "" {
					t.Fatalf("event %d %q: id or name past the first chunk", i, ev)
				}
				sc.fragments = append(sc.fragments, *tc.Function.Arguments)
			}
		}
	}
	return sc
}

func toolRequest(stream bool) msg {
	return msg{"model": "sim-chat", "stream": stream,
		"messages": []msg{{"role": "user", "content": "Look up the record of Ada Lovelace"}},
		"tools": []msg{{"type": "function", "function": msg{"name": "lookup", "parameters": msg{
			"type": "object", "required": []string{"name", "year"}, "additionalProperties": false,
			"properties": msg{"name": msg{"type": "string"}, "year": msg{"type": "integer"}}}}}},
		"tool_choice": msg{"type": "function", "function": msg{"name": "lookup"}}}
}

// TestStreamToolCall: a streamed tool call is OpenAI's tool-call chunks:
// the header (index, id, type, name) first, then the arguments in
// fragments, which make the unstreamed call's arguments, and the finish
// reason tool_calls; no content.
func TestStreamToolCall(t *testing.T) {
	_, url := start(t, Config{})
	_, b := post(t, url+"/v1/chat/completions", toolRequest(false))
	var whole chatResponse
	if err := json.Unmarshal(b, &whole); err != nil || len(whole.Choices) != 1 || len(whole.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("unstreamed answer %s: %v", b, err)
	}
	want := whole.Choices[0].Message.ToolCalls[0]
	_, b = post(t, url+"/v1/chat/completions", toolRequest(true))
	sc := readStreamedCall(t, string(b))
	args := strings.Join(sc.fragments, "")
	if sc.id != want.ID || sc.typ != "function" || sc.name != "lookup" || args != want.Function.Arguments {
		t.Fatalf("streamed call %+v (arguments %s), want %+v", sc, args, want)
	}
	if len(sc.fragments) < 3 || sc.finish != "tool_calls" || sc.content || !sc.done {
		t.Fatalf("streamed call %+v: want several fragments, finish tool_calls, no content, [DONE]", sc)
	}
}

// TestStreamToolCallFaults: ToolCallMalformedRate breaks a streamed call's
// arguments (a well-formed stream whose arguments are not JSON), and the
// mid-stream faults strike inside the arguments.
func TestStreamToolCallFaults(t *testing.T) {
	t.Run("malformed arguments", func(t *testing.T) {
		_, url := start(t, Config{ToolCallMalformedRate: 1})
		_, b := post(t, url+"/v1/chat/completions", toolRequest(true))
		sc := readStreamedCall(t, string(b))
		if args := strings.Join(sc.fragments, ""); json.Valid([]byte(args)) || args == "" || !sc.done || sc.finish != "tool_calls" {
			t.Fatalf("streamed call %+v: want arguments that are not JSON in a whole stream", sc)
		}
	})
	t.Run("cut", func(t *testing.T) {
		s, url := start(t, Config{StreamCutRate: 1})
		_, b, _ := tryPost(t.Context(), url+"/v1/chat/completions", toolRequest(true))
		if strings.Contains(string(b), "[DONE]") || !strings.Contains(string(b), `"tool_calls"`) || s.Stats().StreamCuts != 1 {
			t.Fatalf("body %q, stats %+v: want the call's header, then the cut", b, s.Stats())
		}
	})
	t.Run("malformed chunk", func(t *testing.T) {
		s, url := start(t, Config{StreamMalformedRate: 1})
		_, b := post(t, url+"/v1/chat/completions", toolRequest(true))
		evs := events(string(b))
		if len(evs) < 2 || json.Valid([]byte(evs[len(evs)-1])) || s.Stats().StreamMalformed != 1 {
			t.Fatalf("events %q: want chunks, then one that is not JSON", evs)
		}
	})
}

// TestFragments: fragments are at most maxFragmentBytes, cut at rune
// boundaries, and make the arguments again.
func TestFragments(t *testing.T) {
	for _, s := range []string{"", "{}", `{"name":"Ada Lovelace","year":1815}`, `{"ville":"Zürich","夏":"日本語テキスト"}`} {
		fs := fragments(s)
		for _, f := range fs {
			if len(f) == 0 || len(f) > maxFragmentBytes || !utf8.ValidString(f) {
				t.Fatalf("%q: fragment %q", s, f)
			}
		}
		if strings.Join(fs, "") != s {
			t.Fatalf("%q: fragments %q", s, fs)
		}
	}
}
