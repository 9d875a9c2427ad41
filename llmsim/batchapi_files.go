package llmsim

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	limit := s.cfg.BatchMaxFileBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20) // room for the form's other parts
	mr, err := r.MultipartReader()
	if err != nil {
		badRequest(w, "file", "Expected a multipart/form-data body: "+cutRunes(err.Error(), 80))
		return
	}
	f := &simFile{Object: "file"}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			badRequest(w, "file", "The upload was cut short: "+cutRunes(err.Error(), 80))
			return
		}
		switch p.FormName() {
		case "purpose":
			b, _ := io.ReadAll(io.LimitReader(p, 64))
			f.Purpose = string(b)
		case "file":
			f.Filename = p.FileName()
			data, err := io.ReadAll(io.LimitReader(p, limit+1))
			if err != nil {
				badRequest(w, "file", "The upload was cut short: "+cutRunes(err.Error(), 80))
				return
			}
			if int64(len(data)) > limit {
				badRequest(w, "file", fmt.Sprintf("File is larger than the maximum of %d bytes.", limit))
				return
			}
			f.data = data
		}
	}
	switch {
	case f.Purpose == "":
		badRequest(w, "purpose", "'purpose' must be set.")
		return
	case f.data == nil:
		badRequest(w, "file", "'file' must be set.")
		return
	}
	f.Bytes = int64(len(f.data))
	f.CreatedAt = s.cfg.Now().Unix()
	b := &s.bat
	b.mu.Lock()
	f.ID = s.newID("file-sim")
	b.files[f.ID] = f
	b.order = append(b.order, f)
	b.uploads++
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, f)
}

type listPage[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	FirstID string `json:"first_id,omitempty"`
	LastID  string `json:"last_id,omitempty"`
}

// page returns up to limit items newest first after the one with id after.
func page[T any](all []T, id func(T) string, r *http.Request) (listPage[T], bool) {
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return listPage[T]{}, false
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	out := listPage[T]{Object: "list", Data: []T{}}
	started := after == ""
	for i := len(all) - 1; i >= 0; i-- {
		if !started {
			started = id(all[i]) == after
			continue
		}
		if len(out.Data) == limit {
			out.HasMore = true
			break
		}
		out.Data = append(out.Data, all[i])
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = id(out.Data[0]), id(out.Data[n-1])
	}
	return out, true
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	purpose := r.URL.Query().Get("purpose")
	s.bat.mu.Lock()
	var fs []*simFile
	for _, f := range s.bat.order {
		if purpose == "" || f.Purpose == purpose {
			fs = append(fs, f)
		}
	}
	s.bat.mu.Unlock()
	p, ok := page(fs, func(f *simFile) string { return f.ID }, r)
	if !ok {
		badRequest(w, "limit", "'limit' must be 1 to 10000.")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) *simFile {
	if !s.authorized(w, r) {
		return nil
	}
	s.bat.mu.Lock()
	f := s.bat.files[r.PathValue("id")]
	s.bat.mu.Unlock()
	if f == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "No such File object: "+cutRunes(r.PathValue("id"), 64))
	}
	return f
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if f := s.file(w, r); f != nil {
		writeJSON(w, http.StatusOK, f)
	}
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) {
	if f := s.file(w, r); f != nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		_, _ = w.Write(f.data)
	}
}
