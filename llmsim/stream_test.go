package llmsim

import (
	"encoding/json"
	"strings"
	"testing"
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
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
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
		if err == nil && resp.StatusCode == 200 && strings.Contains(string(b), "[DONE]") {
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
