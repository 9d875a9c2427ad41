package llmsim

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Streamed calls ("stream": true): the answer as server-sent events, the
// way OpenAI sends them. A chat stream's first chunk carries the role, each
// following chunk one word of the answer, then a chunk with the finish
// reason, a usage chunk when stream_options.include_usage asks for it, and
// "data: [DONE]". The first word comes after the call's latency (Latency
// plus PerPromptToken for each prompt token: the time to first token);
// each next word after PerToken for each of its tokens, so a streamed call
// lasts as long as the same call unstreamed. The mid-stream faults strike
// after the first word.

type streamKind uint8

const (
	chatStream streamKind = iota + 1
	completionStream
)

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// streamAnswer is a streamed call's plan.
type streamAnswer struct {
	kind   streamKind
	id     string
	model  string
	words  []string
	finish string
	usage  bool
	fault  int // 0: none; else which fault (faultCut...)
	at     int // the word after which it strikes (1 or more)
}

const (
	faultCut = iota + 1
	faultStall
	faultMalformed
)

type streamCounters struct {
	streams, cuts, stalls, malformed, closed atomic.Int64
}

// newStream plans a streamed answer of text and draws its fault.
func (s *Server) newStream(kind streamKind, id, model, text, finish string, opts *streamOptions) *streamAnswer {
	a := &streamAnswer{kind: kind, id: id, model: model, words: strings.SplitAfter(text, " "), finish: finish,
		usage: opts != nil && opts.IncludeUsage}
	c := &s.cfg
	if c.StreamCutRate+c.StreamStallRate+c.StreamMalformedRate == 0 {
		return a
	}
	switch u := s.draw(); {
	case u < c.StreamCutRate:
		a.fault = faultCut
	case u < c.StreamCutRate+c.StreamStallRate:
		a.fault = faultStall
	case u < c.StreamCutRate+c.StreamStallRate+c.StreamMalformedRate:
		a.fault = faultMalformed
	}
	a.at = 1 + int(s.draw()*float64(max(len(a.words)-1, 1)))
	return a
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type completionChunkChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

// serveStream writes a's answer as events, at the latency model's pace.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, a *answer) {
	sa := a.stream
	c := &s.cfg
	ctx := r.Context()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.sst.streams.Add(1)
	var t *time.Timer
	gone := func() {
		s.sst.closed.Add(1)
		if c.OnStreamClosed != nil {
			c.OnStreamClosed()
		}
	}
	// wait waits d; false when the client left (or Close), after which
	// the handler returns at once.
	wait := func(d time.Duration) bool {
		if d <= 0 {
			if ctx.Err() != nil {
				gone()
				return false
			}
			return true
		}
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			t.Stop()
			gone()
			return false
		case <-s.closed:
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	}
	created := c.Now().Unix()
	object := "chat.completion.chunk"
	if sa.kind == completionStream {
		object = "text_completion"
	}
	send := func(choice any, u *usage) bool {
		ch := chunk{ID: sa.id, Object: object, Created: created, Model: sa.model, Choices: choice, Usage: u}
		b, _ := json.Marshal(ch) // strings and numbers only
		_, err := w.Write(append(append([]byte("data: "), b...), '\n', '\n'))
		if err == nil {
			err = rc.Flush()
		}
		if err != nil { // the client went away
			gone()
			return false
		}
		return true
	}
	piece := func(text string, finish *string) any {
		if sa.kind == completionStream {
			return []completionChunkChoice{{Text: text, FinishReason: finish}}
		}
		if finish != nil {
			return []chatChunkChoice{{Delta: chunkDelta{}, FinishReason: finish}}
		}
		return []chatChunkChoice{{Delta: chunkDelta{Content: &text}}}
	}
	if !wait(c.Latency + time.Duration(a.promptTokens)*c.PerPromptToken) {
		return
	}
	if sa.kind == chatStream {
		empty := ""
		if !send([]chatChunkChoice{{Delta: chunkDelta{Role: "assistant", Content: &empty}}}, nil) {
			return
		}
	}
	for i, word := range sa.words {
		if i > 0 && !wait(time.Duration(Tokens(word))*c.PerToken) {
			return
		}
		if sa.fault != 0 && i == sa.at {
			s.fault(w, r, sa.fault, rc)
			return
		}
		if word == "" {
			continue
		}
		if !send(piece(word, nil), nil) {
			return
		}
	}
	finish := sa.finish
	if !send(piece("", &finish), nil) {
		return
	}
	if sa.usage {
		u := usage{PromptTokens: a.promptTokens, CompletionTokens: a.completionTokens, TotalTokens: a.promptTokens + a.completionTokens}
		if !send([]any{}, &u) {
			return
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	_ = rc.Flush()
	s.st.ok.Add(1)
	s.st.inputs.Add(int64(a.inputs))
	s.st.promptTokens.Add(int64(a.promptTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
}

// fault injects a mid-stream fault.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, f int, rc *http.ResponseController) {
	log := s.cfg.Logger
	switch f {
	case faultCut:
		s.sst.cuts.Add(1)
		log.Debug("fault: stream cut", "path", r.URL.Path)
		panic(http.ErrAbortHandler) // the connection closes without [DONE]
	case faultStall:
		s.sst.stalls.Add(1)
		log.Debug("fault: stream stall", "path", r.URL.Path)
		select {
		case <-r.Context().Done():
			s.sst.closed.Add(1)
			if s.cfg.OnStreamClosed != nil {
				s.cfg.OnStreamClosed()
			}
		case <-s.closed:
		}
		panic(http.ErrAbortHandler)
	case faultMalformed:
		s.sst.malformed.Add(1)
		log.Debug("fault: malformed chunk", "path", r.URL.Path)
		_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"bro\n\n"))
		_ = rc.Flush()
	}
}
