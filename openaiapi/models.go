package openaiapi

import (
	"net/http"
	"slices"
	"strings"
)

// listModels serves GET /v1/models: the configured routes, by name.
func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	routes := h.core.Routes()
	out := modelList{Object: "list", Data: make([]model, 0, len(routes))}
	for _, rt := range routes {
		if modelVisible(r.Context(), rt.Name) {
			out.Data = append(out.Data, h.model(rt.Name))
		}
	}
	slices.SortFunc(out.Data, func(a, b model) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, &out)
}

// getModel serves GET /v1/models/{id}.
func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	for _, rt := range h.core.Routes() {
		if rt.Name == id && modelVisible(r.Context(), id) {
			m := h.model(id)
			writeJSON(w, &m)
			return
		}
	}
	WriteError(w, notFound("model", "model_not_found", "The model does not exist: %q", truncate(id)))
}

// model describes a route as OpenAI describes a model. The backend behind
// it is operator detail and stays off the wire.
func (h *Handler) model(name string) model {
	return model{ID: name, Object: "model", Created: h.created, OwnedBy: "batcher"}
}
