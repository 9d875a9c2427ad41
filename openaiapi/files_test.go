package openaiapi_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/batcherhq/batcher/openaiapi"
)

const batchJSONL = `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"hi"}]}}
{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"model":"embed","input":"hello"}}
`

func TestFiles(t *testing.T) {
	e := newEnv(t, newFake())
	f, err := e.client.Files.New(testCtx(t), openai.FileNewParams{
		File:    openai.File(strings.NewReader(batchJSONL), "requests.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.ID, "file-") || f.Bytes != int64(len(batchJSONL)) || f.Filename != "requests.jsonl" || f.Purpose != "batch" {
		t.Errorf("file %+v", f)
	}
	got, err := e.client.Files.Get(testCtx(t), f.ID)
	if err != nil || got.ID != f.ID || got.Bytes != f.Bytes || got.CreatedAt != f.CreatedAt {
		t.Errorf("get: %+v, %v; want %+v", got, err, f)
	}
	resp, err := e.client.Files.Content(testCtx(t), f.ID)
	if err != nil {
		t.Fatal(err)
	}
	content, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(content) != batchJSONL {
		t.Errorf("content %q, %v; want the upload back", content, err)
	}
	del, err := e.client.Files.Delete(testCtx(t), f.ID)
	if err != nil || !del.Deleted || del.ID != f.ID {
		t.Errorf("delete: %+v, %v", del, err)
	}
	_, err = e.client.Files.Get(testCtx(t), f.ID)
	if ae := apiError(t, err); ae.StatusCode != http.StatusNotFound {
		t.Errorf("get after delete: %d, want 404", ae.StatusCode)
	}
}

func TestFilesErrors(t *testing.T) {
	e := newEnv(t, newFake(), withHandler(openaiapi.WithMaxFileBytes(1000)))
	for _, tc := range []struct {
		name    string
		content string
		purpose openai.FilePurpose
		status  int
		param   string
		msg     string
	}{
		{"not jsonl", "{\"a\":1}\nnot json\n", "batch", 400, "file", "line 2: want a JSON object"},
		{"malformed line", "{\"a\":1}\n{\"a\":}\n", "batch", 400, "file", "line 2, column 6: malformed JSON"},
		{"empty", "\n\n", "batch", 400, "file", "no JSON lines"},
		{"purpose", batchJSONL, "fine-tune", 400, "purpose", "must be batch"},
		{"too large", strings.Repeat("{\"a\":1}\n", 200), "batch", 413, "file", "larger than 1000 bytes"},
	} {
		_, err := e.client.Files.New(testCtx(t), openai.FileNewParams{
			File: openai.File(bytes.NewReader([]byte(tc.content)), "x.jsonl", "application/jsonl"), Purpose: tc.purpose,
		})
		ae := apiError(t, err)
		if ae.StatusCode != tc.status || ae.Param != tc.param || !strings.Contains(ae.Message, tc.msg) {
			t.Errorf("%s: %d param %q %q; want %d param %q containing %q", tc.name, ae.StatusCode, ae.Param, ae.Message, tc.status, tc.param, tc.msg)
		}
	}
	for _, id := range []string{"file-000000000000000000000000", "file-../../etc/passwd", "nope"} {
		_, err := e.client.Files.Get(testCtx(t), id)
		if ae := apiError(t, err); ae.StatusCode != http.StatusNotFound || ae.Code != "file_not_found" {
			t.Errorf("get %q: %d %q, want 404 file_not_found", id, ae.StatusCode, ae.Code)
		}
		_, err = e.client.Files.Content(testCtx(t), id)
		if ae := apiError(t, err); ae.StatusCode != http.StatusNotFound {
			t.Errorf("content %q: %d, want 404", id, ae.StatusCode)
		}
	}
	if left, err := os.ReadDir(e.dir); err != nil || len(left) != 0 {
		t.Errorf("refused uploads left %d entries in the store (%v)", len(left), err)
	}
	code, _, body := e.post(t, "/files", `{"purpose":"batch"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "multipart/form-data") {
		t.Errorf("JSON upload: %d %s", code, body)
	}
	checkErrorShape(t, body)
	// A form cut short: the cause, without the multipart package's prefix.
	code, _, body = e.post(t, "/files", "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch", "Content-Type", "multipart/form-data; boundary=b")
	if code != http.StatusBadRequest || !strings.Contains(body, "malformed multipart body") {
		t.Errorf("cut multipart upload: %d %s", code, body)
	}
	checkErrorShape(t, body)
	code, _, body = e.post(t, "/files", "x", "Content-Type", "multipart/form-data")
	if code != http.StatusBadRequest || !strings.Contains(body, "malformed multipart body") {
		t.Errorf("multipart upload without a boundary: %d %s", code, body)
	}
	checkErrorShape(t, body)
}

func TestFilesNotConfigured(t *testing.T) {
	e := newEnv(t, newFake(), func(c *envConfig) { c.noFiles = true })
	_, err := e.client.Files.Get(testCtx(t), "file-000000000000000000000000")
	if ae := apiError(t, err); ae.StatusCode != http.StatusNotImplemented || ae.Code != "files_not_configured" {
		t.Errorf("%d %q, want 501", ae.StatusCode, ae.Code)
	}
}

// TestFileStoreForJobs: the store the job API shares: files created there
// are served, and deleted ones are gone.
func TestFileStoreForJobs(t *testing.T) {
	dir := t.TempDir()
	fs, err := openaiapi.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("", "batch_output", "out.jsonl", strings.NewReader("{}\n"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create("", "batch_output", "big.jsonl", strings.NewReader(strings.Repeat("x", 11)), 10); err == nil {
		t.Error("11 bytes past a 10-byte limit: no error")
	}
	e := newEnv(t, newFake(), func(c *envConfig) { c.noFiles = true }, withHandler(openaiapi.WithFileStore(fs)))
	got, err := e.client.Files.Get(testCtx(t), f.ID)
	if err != nil || got.Purpose != "batch_output" || got.Bytes != 3 {
		t.Errorf("get: %+v, %v", got, err)
	}
	if err := fs.Delete(f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(f.ID); !errors.Is(err, openaiapi.ErrFileNotFound) {
		t.Errorf("after delete: %v, want ErrFileNotFound", err)
	}
}

// TestFileStoreAdopt: a file adopted under a chosen id is served like an
// upload; adopting it again is harmless; a bad id or a missing path fails.
func TestFileStoreAdopt(t *testing.T) {
	dir := t.TempDir()
	s, err := openaiapi.OpenFileStore(dir + "/files")
	if err != nil {
		t.Fatal(err)
	}
	src := dir + "/results.jsonl"
	if err := os.WriteFile(src, []byte("{\"a\":1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const id = "file-0123456789abcdef01234567"
	for range 2 {
		f, err := s.Adopt("", id, "batch_output", "out.jsonl", src)
		if err != nil || f.ID != id || f.Bytes != 8 || f.Purpose != "batch_output" {
			t.Fatalf("adopt: %+v, %v", f, err)
		}
	}
	_, c, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	_ = c.Close()
	if string(got) != "{\"a\":1}\n" {
		t.Errorf("content %q", got)
	}
	if _, err := s.Adopt("", "../x", "batch_output", "x", src); err == nil {
		t.Error("adopting under a bad id succeeded")
	}
	if _, err := s.Adopt("", "file-aaaaaaaaaaaaaaaaaaaaaaaa", "batch_output", "x", dir+"/missing"); err == nil {
		t.Error("adopting a missing file succeeded")
	}
}
