package llmsim

import (
	"net/http"
)

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	out := modelList{Object: "list", Data: make([]modelInfo, 0, len(s.cfg.Models))}
	for _, m := range s.cfg.Models {
		out.Data = append(out.Data, modelInfo{ID: m, Object: "model", OwnedBy: "llmsim"})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	m := r.PathValue("model")
	if !s.checkModel(w, m) {
		return
	}
	writeJSON(w, http.StatusOK, modelInfo{ID: m, Object: "model", OwnedBy: "llmsim"})
}
