package llmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"
)

// advance moves a batch on by the clock: its counts while it runs, its
// answers once its time is up (or at once when it was cancelled).
func (s *Server) advance(b *simBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines == nil {
		return // ended (or failed at validation)
	}
	if b.Status == "in_progress" && s.held(b.ID, b.Metadata, int(b.RequestCounts.Completed)) {
		return
	}
	now := s.cfg.Now()
	el := now.Sub(b.created)
	if b.Status == "in_progress" && el < s.cfg.BatchTime {
		b.RequestCounts.Completed = b.RequestCounts.Total * int64(el) / int64(s.cfg.BatchTime)
		return
	}
	done := len(b.lines)
	if b.Status == "cancelling" && el < s.cfg.BatchTime {
		done = int(int64(len(b.lines)) * int64(el) / int64(max(s.cfg.BatchTime, 1)))
	}
	s.finish(b, done, now)
}

// held reports whether Config.HoldBatch holds the batch now.
func (s *Server) held(id string, metadata map[string]string, done int) bool {
	if s.cfg.HoldBatch == nil {
		return false
	}
	ch := s.cfg.HoldBatch(id, metadata, done)
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *batchError `json:"error"`
}

type ctxKey struct{}

// batchCall reports whether r is a line of a batch being answered: no
// rate limits, faults or latency.
func batchCall(r *http.Request) bool { return r.Context().Value(ctxKey{}) != nil }

// finish answers the first done lines and ends the rest cancelled (when
// the batch was cancelled), then stores the output and error files.
func (s *Server) finish(b *simBatch, done int, now time.Time) {
	var out, errf bytes.Buffer
	expired := false
	var answered int64
	b.RequestCounts.Completed, b.RequestCounts.Failed = 0, 0
	ctx := context.WithValue(context.Background(), ctxKey{}, true)
	for i, raw := range b.lines {
		var l struct {
			CustomID string          `json:"custom_id"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		_ = json.Unmarshal(raw, &l) // validated at creation
		ol := outLine{ID: "batch_req_" + strconv.Itoa(i), CustomID: l.CustomID}
		u := s.draw()
		switch {
		case i >= done:
			ol.Error = &batchError{Code: "batch_cancelled", Message: "This request was not executed because the batch was cancelled."}
		case u < s.cfg.BatchExpireRate:
			expired = true
			ol.Error = &batchError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
		case u < s.cfg.BatchExpireRate+s.cfg.BatchFailRate:
			ol.Response = &struct {
				StatusCode int             `json:"status_code"`
				RequestID  string          `json:"request_id"`
				Body       json.RawMessage `json:"body"`
			}{500, "req_sim" + strconv.Itoa(i), json.RawMessage(`{"error":{"message":"The server had an error processing your request.","type":"server_error"}}`)}
		default:
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, l.URL, bytes.NewReader(l.Body))
			req.Header.Set("Content-Type", "application/json")
			if s.cfg.APIKey != "" {
				req.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
			}
			rec := httptest.NewRecorder()
			s.mux.ServeHTTP(rec, req)
			answered++
			ol.Response = &struct {
				StatusCode int             `json:"status_code"`
				RequestID  string          `json:"request_id"`
				Body       json.RawMessage `json:"body"`
			}{rec.Code, "req_sim" + strconv.Itoa(i), json.RawMessage(bytes.TrimSpace(rec.Body.Bytes()))}
		}
		line, _ := json.Marshal(&ol)
		line = append(line, '\n')
		if ol.Error != nil || ol.Response.StatusCode != http.StatusOK {
			errf.Write(line)
			b.RequestCounts.Failed++
		} else {
			out.Write(line)
			b.RequestCounts.Completed++
		}
	}
	t := now.Unix()
	switch {
	case b.Status == "cancelling":
		b.Status, b.CancelledAt = "cancelled", &t
	case expired:
		b.Status = "expired"
	default:
		b.Status, b.CompletedAt = "completed", &t
	}
	s.bat.mu.Lock()
	for _, data := range []*bytes.Buffer{&out, &errf} {
		if data.Len() == 0 {
			continue
		}
		f := &simFile{ID: s.newID("file-sim"), Object: "file", Bytes: int64(data.Len()), CreatedAt: t, data: data.Bytes()}
		if data == &out {
			f.Filename, f.Purpose, b.OutputFileID = b.ID+"_output.jsonl", "batch_output", &f.ID
		} else {
			f.Filename, f.Purpose, b.ErrorFileID = b.ID+"_error.jsonl", "batch_output", &f.ID
		}
		s.bat.files[f.ID] = f
		s.bat.order = append(s.bat.order, f)
	}
	s.bat.linesDone += int64(len(b.lines))
	s.bat.answered += answered
	s.bat.mu.Unlock()
	b.lines = nil
}
