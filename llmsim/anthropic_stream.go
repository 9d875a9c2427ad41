package llmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// serveAnthropicStream writes a's answer as Anthropic's events, at the
// latency model's pace.
func (s *Server) serveAnthropicStream(w http.ResponseWriter, r *http.Request, a *answer) {
	aa := a.anthropic
	c := &s.cfg
	s.startEvents(w)
	sw := &sseWriter{streamPace: streamPace{s: s, ctx: r.Context()}, w: w, r: r, rc: http.NewResponseController(w)}
	defer sw.stop()
	resp := aa.resp
	if !sw.wait(c.Latency + time.Duration(a.promptTokens)*c.PerPromptToken) {
		return
	}
	start := *resp
	start.Content, start.StopReason, start.StopSequence = []anthropicBlock{}, nil, nil
	start.Usage = anthropicUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: 1}
	if !sw.send("message_start", map[string]any{"type": "message_start", "message": start}) {
		return
	}
	for i := range resp.Content {
		if !s.streamBlock(sw, i, &resp.Content[i], aa.stream) {
			return
		}
	}
	if !sw.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": resp.StopReason, "stop_sequence": resp.StopSequence},
		"usage": map[string]int{"output_tokens": resp.Usage.OutputTokens}}) {
		return
	}
	if !sw.send("message_stop", map[string]string{"type": "message_stop"}) {
		return
	}
	s.st.ok.Add(1)
	s.st.promptTokens.Add(int64(a.promptTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
}

// sseWriter writes one streamed answer's events, paced by its timer.
type sseWriter struct {
	streamPace
	w  http.ResponseWriter
	r  *http.Request
	rc *http.ResponseController
}

// send writes and flushes one event; false when the client is gone.
func (sw *sseWriter) send(event string, data any) bool {
	b, _ := json.Marshal(data) // strings, numbers and raw JSON only
	_, err := fmt.Fprintf(sw.w, "event: %s\ndata: %s\n\n", event, b)
	if err == nil {
		err = sw.rc.Flush()
	}
	if err != nil {
		sw.gone()
		return false
	}
	return true
}

// streamBlock streams content block i: its start, its deltas (text in the
// answer's words, a tool call's input in pieces) with the stream's fault,
// and its stop. false: the stream ended.
func (s *Server) streamBlock(sw *sseWriter, i int, b *anthropicBlock, sa *streamAnswer) bool {
	type delta struct {
		Type        string `json:"type"`
		Text        string `json:"text,omitempty"`
		PartialJSON string `json:"partial_json,omitempty"`
	}
	var pieces []string
	var first any
	switch b.Type {
	case "tool_use":
		first = map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}
		js := string(b.Input)
		for len(js) > 0 { // Anthropic sends the input in pieces
			n := min(len(js), 12)
			pieces, js = append(pieces, js[:n]), js[n:]
		}
	default:
		first = map[string]any{"type": "text", "text": ""}
		pieces = sa.words
	}
	if !sw.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": first}) {
		return false
	}
	if i == 0 && !sw.send("ping", map[string]string{"type": "ping"}) {
		return false
	}
	for k, p := range pieces {
		if k > 0 && !sw.wait(time.Duration(Tokens(p))*s.cfg.PerToken) {
			return false
		}
		if sa.fault != 0 && k == sa.at {
			s.anthropicStreamFault(sw.w, sw.r, sa.fault, sw.rc)
			return false
		}
		if p == "" {
			continue
		}
		d := delta{Type: "text_delta", Text: p}
		if b.Type == "tool_use" {
			d = delta{Type: "input_json_delta", PartialJSON: p}
		}
		if !sw.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}) {
			return false
		}
	}
	return sw.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// anthropicStreamFault injects a mid-stream fault: a cut or a stall as on
// the OpenAI endpoints; the malformed fault sends an event whose data is
// not JSON.
func (s *Server) anthropicStreamFault(w http.ResponseWriter, r *http.Request, f int, rc *http.ResponseController) {
	if f == faultMalformed {
		s.sst.malformed.Add(1)
		s.cfg.Logger.Debug("fault: malformed event", "path", r.URL.Path)
		_, _ = w.Write([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"bro\n\n"))
		_ = rc.Flush()
		return
	}
	s.fault(w, r, f, rc)
}
