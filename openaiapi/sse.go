package openaiapi

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// sseWriter writes Server-Sent Events as OpenAI streams them: each event
// one "data: <json>" line and a blank line, the last "data: [DONE]".
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) event(v any) {
	s.buf.Reset()
	s.buf.WriteString("data: ")
	_ = json.NewEncoder(&s.buf).Encode(v) // our own types: never fails
	s.buf.WriteByte('\n')
	s.write()
}

func (s *sseWriter) done() {
	s.buf.Reset()
	s.buf.WriteString("data: [DONE]\n\n")
	s.write()
}

func (s *sseWriter) write() {
	// A failed write means the caller went away: nothing to tell it.
	if _, err := s.w.Write(s.buf.Bytes()); err == nil {
		_ = s.rc.Flush()
	}
}
