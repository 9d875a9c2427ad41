package llmsim

import (
	"encoding/json"
	"net/http"
	"strconv"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "", "llmsim could not encode its answer.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func badRequest(w http.ResponseWriter, param, msg string) {
	var p *string
	if param != "" {
		p = &param
	}
	writeErrorBody(w, http.StatusBadRequest, errorDetail{Message: msg, Type: "invalid_request_error", Param: p})
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c *string
	if code != "" {
		c = &code
	}
	writeErrorBody(w, status, errorDetail{Message: msg, Type: typ, Code: c})
}

func writeErrorBody(w http.ResponseWriter, status int, d errorDetail) {
	body, _ := json.Marshal(errorBody{Error: d}) // strings only
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
