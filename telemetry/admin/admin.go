// Package admin serves batcherd's admin listener: the live status page at /
// (fed by Server-Sent Events at /events), the snapshot as JSON at
// /api/snapshot and /api/history, the Prometheus exposition at /metrics,
// /healthz, and net/http/pprof under /debug/pprof/ when enabled.
//
// The page is embedded (no CDN, no external script) and draws its charts
// with inline SVG.
package admin

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/batcherhq/batcher/telemetry"
)

//go:embed static
var static embed.FS

// DefaultHistoryOnConnect is how many snapshots a new event stream gets
// first, for the page's charts.
const DefaultHistoryOnConnect = 600

// Config configures the admin handler.
type Config struct {
	// Sampler feeds the page, the events and the JSON API. Required.
	Sampler *telemetry.Sampler
	// Metrics serves /metrics; nil: 404.
	Metrics http.Handler
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
}

// Server is the admin handler. Close it when the listener shuts down, so
// that open event streams end (http.Server.Shutdown waits for them).
type Server struct {
	mux       *http.ServeMux
	sampler   *telemetry.Sampler
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns the admin handler.
func New(cfg Config) *Server {
	s := &Server{mux: http.NewServeMux(), sampler: cfg.Sampler, closing: make(chan struct{})}
	page, _ := fs.Sub(static, "static")
	index, _ := fs.ReadFile(page, "index.html")
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'")
		_, _ = w.Write(index)
	})
	s.mux.HandleFunc("GET /events", s.events)
	s.mux.HandleFunc("GET /api/snapshot", func(w http.ResponseWriter, _ *http.Request) {
		snap, _ := s.sampler.Latest()
		writeJSON(w, snap)
	})
	s.mux.HandleFunc("GET /api/history", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, s.sampler.History())
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-s.closing:
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics)
	}
	if cfg.Pprof {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close ends the open event streams; later ones end at once.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closing) }) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// events streams snapshots as Server-Sent Events: first "history" (the
// snapshots kept, oldest first), then a "snapshot" for each new one, until
// the client goes, the server closes or the sampler stops.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	select {
	case <-s.closing:
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	default:
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	send := func(event string, v any) bool {
		data, err := json.Marshal(v)
		if err != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a reader that stopped reading is dropped
		if _, err := w.Write([]byte("event: " + event + "\ndata: ")); err != nil {
			return false
		}
		if _, err := w.Write(data); err != nil {
			return false
		}
		if _, err := w.Write([]byte("\n\n")); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	if _, err := w.Write([]byte("retry: 2000\n\n")); err != nil {
		return
	}
	hist := s.sampler.History()
	if len(hist) > DefaultHistoryOnConnect {
		hist = hist[len(hist)-DefaultHistoryOnConnect:]
	}
	// The charts need only the request figures of the past; the newest
	// snapshot goes whole, for the tables.
	for i := range hist[:max(len(hist)-1, 0)] {
		hist[i] = telemetry.Snapshot{Time: hist[i].Time, Requests: hist[i].Requests}
	}
	if !send("history", hist) {
		return
	}
	_, seq := s.sampler.Latest()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		snap, n, err := s.sampler.Next(ctx, seq)
		if err != nil {
			return
		}
		seq = n
		if !send("snapshot", snap) {
			return
		}
	}
}
