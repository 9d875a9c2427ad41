package llmsim

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// begin counts the call, checks its key and decodes its body into req.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, req any) bool {
	s.st.requests.Add(1)
	if !s.authorized(w, r) {
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("Request body exceeds %d bytes.", s.cfg.MaxRequestBytes))
			return false
		}
		badRequest(w, "", "Could not read the request body.")
		return false
	}
	if err := json.Unmarshal(body, req); err != nil {
		badRequest(w, "", "We could not parse the JSON body of your request: "+cutRunes(err.Error(), 120))
		return false
	}
	return true
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1 {
		return true
	}
	writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
	return false
}

func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if s.models[model] {
		return true
	}
	if model == "" {
		badRequest(w, "model", "'model' must be set.")
		return false
	}
	writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
		"The model `"+cutRunes(model, 64)+"` does not exist or you do not have access to it.")
	return false
}

// serve takes the call through the rate limits, a concurrency slot, the
// fault draw and the latency model, then writes a.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, a *answer) {
	h := w.Header()
	if batchCall(r) {
		s.st.ok.Add(1)
		s.st.promptTokens.Add(int64(a.promptTokens))
		s.st.completionTokens.Add(int64(a.completionTokens))
		writeJSON(w, http.StatusOK, a.body)
		return
	}
	if s.limited(w, r, a) {
		return
	}
	ctx := r.Context()
	if s.sem != nil {
		select {
		case s.sem <- struct{}{}:
			defer func() { <-s.sem }()
		case <-ctx.Done():
			return
		case <-s.closed:
			panic(http.ErrAbortHandler)
		}
	}
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.st.maxInFlight.Load(); n > m && !s.st.maxInFlight.CompareAndSwap(m, n); m = s.st.maxInFlight.Load() {
	}

	if s.injectFault(w, r, a) {
		return
	}
	c := &s.cfg
	if a.stream != nil {
		s.serveStream(w, r, a)
		return
	}
	if a.anthropic != nil && a.anthropic.stream != nil {
		s.serveAnthropicStream(w, r, a)
		return
	}
	d := c.Latency + time.Duration(a.completionTokens)*c.PerToken + time.Duration(a.promptTokens)*c.PerPromptToken
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.closed:
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	}
	s.st.ok.Add(1)
	s.st.inputs.Add(int64(a.inputs))
	s.st.promptTokens.Add(int64(a.promptTokens))
	s.st.completionTokens.Add(int64(a.completionTokens))
	if a.packedItems > 0 {
		s.st.packed.Add(1)
		s.st.packedItems.Add(int64(a.packedItems))
	}
	h.Set("openai-processing-ms", strconv.FormatInt(d.Milliseconds(), 10))
	writeJSON(w, http.StatusOK, a.body)
}
