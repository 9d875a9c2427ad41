package llmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Streamed calls ("stream": true): the answer as server-sent events, the
// way OpenAI sends them. A chat stream's first chunk carries the role, each
// following chunk one word of the answer, then a chunk with the finish
// reason, a usage chunk when stream_options.include_usage asks for it, and
// "data: [DONE]". A tool call streams as OpenAI streams it: the first chunk
// carries the role and the call's index, id, type and function name with
// empty arguments, each following chunk a fragment of the arguments
// (delta.tool_calls[0].function.arguments), and the finish reason is
// "tool_calls"; ToolCallMalformedRate and SchemaViolationRate break the
// streamed arguments as they break an unstreamed call's. The first word comes after the call's latency (Latency
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
	words  []string      // the text's words, or the tool call's argument fragments
	call   *toolCallWire // a tool call's answer (tools.go); nil for text
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

// newStream plans a streamed answer of text, or of the tool call call
// when it is not nil, and draws its fault.
func (s *Server) newStream(kind streamKind, id, model, text string, call *toolCallWire, finish string, opts *streamOptions) *streamAnswer {
	a := &streamAnswer{kind: kind, id: id, model: model, call: call, finish: finish,
		usage: opts != nil && opts.IncludeUsage}
	if call != nil {
		a.words = fragments(call.Function.Arguments)
	} else {
		a.words = strings.SplitAfter(text, " ")
	}
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
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []chunkToolCall `json:"tool_calls,omitempty"`
}

// chunkToolCall is a piece of a streamed tool call: the first carries the
// id, type and name, each next one a fragment of the arguments.
type chunkToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function chunkFunction `json:"function"`
}

type chunkFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// maxFragmentBytes bounds a streamed tool call's argument fragment, about
// a token's worth of JSON, as a model writes it.
const maxFragmentBytes = 6

// fragments cuts a tool call's arguments into fragments of at most
// maxFragmentBytes, at rune boundaries.
func fragments(args string) []string {
	var out []string
	for len(args) > 0 {
		n := min(maxFragmentBytes, len(args))
		for n > 1 && n < len(args) && !utf8.RuneStart(args[n]) {
			n-- // invalid UTF-8 may leave a fragment cut mid-byte-run: no harm
		}
		out = append(out, args[:n])
		args = args[n:]
	}
	return out
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

// startEvents answers 200 with a server-sent event stream's headers and
// counts the stream: the start of either dialect's streamed answer.
func (s *Server) startEvents(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.sst.streams.Add(1)
}

// serveStream writes a's answer as events, at the latency model's pace.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, a *answer) {
	sa := a.stream
	c := &s.cfg
	s.startEvents(w)
	o := &streamOut{streamPace: streamPace{s: s, ctx: r.Context()}, sa: sa, w: w, rc: http.NewResponseController(w),
		created: c.Now().Unix(), object: "chat.completion.chunk"}
	if sa.kind == completionStream {
		o.object = "text_completion"
	}
	o.enc = json.NewEncoder(&o.buf)
	if !o.wait(c.Latency + time.Duration(a.promptTokens)*c.PerPromptToken) {
		return
	}
	if sa.kind == chatStream {
		first := chunkDelta{Role: "assistant"}
		if c := sa.call; c != nil {
			first.ToolCalls = []chunkToolCall{{ID: c.ID, Type: c.Type, Function: chunkFunction{Name: c.Function.Name}}}
		} else {
			first.Content = new(string)
		}
		if !o.send([]chatChunkChoice{{Delta: first}}, nil) {
			return
		}
	}
	for i, word := range sa.words {
		if i > 0 && !o.wait(time.Duration(Tokens(word))*c.PerToken) {
			return
		}
		if sa.fault != 0 && i == sa.at {
			s.fault(w, r, sa.fault, o.rc)
			return
		}
		if word == "" {
			continue
		}
		if !o.send(o.piece(word, nil), nil) {
			return
		}
	}
	finish := sa.finish
	if !o.send(o.piece("", &finish), nil) {
		return
	}
	if sa.usage {
		u := usage{PromptTokens: a.promptTokens, CompletionTokens: a.completionTokens, TotalTokens: a.promptTokens + a.completionTokens}
		if !o.send([]any{}, &u) {
			return
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	_ = o.rc.Flush()
	s.st.ok.Add(1)
	s.st.inputs.Add(int64(a.inputs))
	s.st.promptTokens.Add(int64(a.promptTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
}

// streamOut writes one streamed answer's events, at its pace.
type streamOut struct {
	streamPace
	sa      *streamAnswer
	w       http.ResponseWriter
	rc      *http.ResponseController
	created int64
	object  string
	buf     bytes.Buffer // an event as it is built
	enc     *json.Encoder
}

// streamPace paces one streamed answer's events and notes a client that
// left: the OpenAI (streamOut) and Anthropic (sseWriter) writers share it.
type streamPace struct {
	s   *Server
	ctx context.Context // the request's
	t   *time.Timer     // made at the first wait
}

// gone counts a stream its client closed.
func (p *streamPace) gone() {
	p.s.sst.closed.Add(1)
	if f := p.s.cfg.OnStreamClosed; f != nil {
		f()
	}
}

// wait waits d; false when the client left meanwhile. The server's Close
// aborts the handler.
func (p *streamPace) wait(d time.Duration) bool {
	if d <= 0 {
		if p.ctx.Err() != nil {
			p.gone()
			return false
		}
		return true
	}
	if p.t == nil {
		p.t = time.NewTimer(d)
	} else {
		p.t.Reset(d)
	}
	select {
	case <-p.t.C:
		return true
	case <-p.ctx.Done():
		p.t.Stop()
		p.gone()
		return false
	case <-p.s.closed:
		p.t.Stop()
		panic(http.ErrAbortHandler)
	}
}

// stop stops the timer, if a wait made one.
func (p *streamPace) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}

// send writes and flushes one chunk; false when the client went away.
func (o *streamOut) send(choice any, u *usage) bool {
	ch := chunk{ID: o.sa.id, Object: o.object, Created: o.created, Model: o.sa.model, Choices: choice, Usage: u}
	o.buf.Reset()
	o.buf.WriteString("data: ")
	_ = o.enc.Encode(ch) // strings and numbers only; ends with a newline
	o.buf.WriteByte('\n')
	_, err := o.w.Write(o.buf.Bytes())
	if err == nil {
		err = o.rc.Flush()
	}
	if err != nil { // the client went away
		o.gone()
		return false
	}
	return true
}

// piece returns the choices of a chunk that carries text (a word of the
// answer, or a fragment of its tool call's arguments) or the finish
// reason.
func (o *streamOut) piece(text string, finish *string) any {
	if o.sa.kind == completionStream {
		return []completionChunkChoice{{Text: text, FinishReason: finish}}
	}
	if finish != nil {
		return []chatChunkChoice{{Delta: chunkDelta{}, FinishReason: finish}}
	}
	if o.sa.call != nil {
		return []chatChunkChoice{{Delta: chunkDelta{ToolCalls: []chunkToolCall{{Function: chunkFunction{Arguments: text}}}}}}
	}
	return []chatChunkChoice{{Delta: chunkDelta{Content: &text}}}
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
