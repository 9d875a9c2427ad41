package llmsim

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
)

// injectFault draws whether the call meets a fault (ErrorRate,
// TimeoutRate, ResetRate, MalformedRate) and, if so, answers with it and
// returns true.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, a *answer) bool {
	h := w.Header()
	ctx := r.Context()
	c := &s.cfg
	switch u := s.draw(); {
	case u < c.ErrorRate:
		s.st.errors.Add(1)
		if a.anthropic != nil {
			s.anthropicFault(w, r)
			return true
		}
		status := []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}[int(s.draw()*3)%3]
		c.Logger.Debug("fault: server error", "path", r.URL.Path, "status", status)
		writeError(w, status, "server_error", "", "The server had an error while processing your request. Sorry about that!")
		return true
	case u < c.ErrorRate+c.TimeoutRate:
		s.st.timeouts.Add(1)
		c.Logger.Debug("fault: hang", "path", r.URL.Path)
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		panic(http.ErrAbortHandler)
	case u < c.ErrorRate+c.TimeoutRate+c.ResetRate:
		s.st.resets.Add(1)
		c.Logger.Debug("fault: connection reset", "path", r.URL.Path)
		reset(w)
		return true
	case u < c.ErrorRate+c.TimeoutRate+c.ResetRate+c.MalformedRate:
		s.st.malformed.Add(1)
		c.Logger.Debug("fault: malformed body", "path", r.URL.Path)
		body, _ := json.Marshal(a.body)
		if s.draw() < 0.5 {
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(body[:len(body)/2])
			return true
		}
		h.Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>")
		return true
	}
	return false
}

// draw returns the next number from the fault source, in [0, 1).
func (s *Server) draw() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

// reset closes the call's connection with a TCP RST, or aborts the call
// where the connection cannot be taken over (HTTP/2).
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST, not FIN
	}
	_ = conn.Close()
}
