package openaiapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/openaiapi"
)

// TestBatchesSeam: a handler mounted with WithBatches gets /v1/batches and
// the paths under it, behind the same authentication, and answers with
// DecodeJSON and WriteError as the rest of the API does.
func TestBatchesSeam(t *testing.T) {
	var paths []string
	batches := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		var body struct {
			InputFileID string `json:"input_file_id"`
		}
		if r.Method == http.MethodPost && r.URL.Path == "/v1/batches" {
			if e := openaiapi.DecodeJSON(w, r, &body, 1<<10, 8); e != nil {
				openaiapi.WriteError(w, e)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	e := newEnv(t, newFake(), withHandler(openaiapi.WithBatches(batches)))
	if code, _, body := e.post(t, "/batches", `{"input_file_id":"file-1"}`); code != http.StatusOK {
		t.Errorf("POST /v1/batches: %d %s", code, body)
	}
	if code, _, _ := e.post(t, "/batches/batch_1/cancel", ``); code != http.StatusOK {
		t.Errorf("POST /v1/batches/batch_1/cancel: %d", code)
	}
	code, _, body := e.post(t, "/batches", `{"input_file_id":`)
	if code != http.StatusBadRequest || !strings.Contains(body, "malformed JSON at line 1") {
		t.Errorf("malformed: %d %s", code, body)
	}
	resp, err := http.Get(e.url + "/batches")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}
	want := []string{"POST /v1/batches", "POST /v1/batches/batch_1/cancel", "POST /v1/batches"}
	if strings.Join(paths, ",") != strings.Join(want, ",") {
		t.Errorf("mounted handler saw %q, want %q", paths, want)
	}
}
