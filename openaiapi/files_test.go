package openaiapi_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/pagination"

	"github.com/batcherhq/batcher/batcher"
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
		t.Errorf("refused uploads left %d entries in the store (%v): %v", len(left), err, left)
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

// TestFilesList: GET /v1/files lists the caller's tenant's files only,
// newest first (order=asc: oldest first), filtered by purpose, paged by
// limit and after as OpenAI pages them, through the SDK's pager too; bad
// query parameters are a 400 naming the parameter and its limit.
func TestFilesList(t *testing.T) {
	store, err := openaiapi.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, newFake(), func(c *envConfig) { c.noFiles = true }, withHandler(openaiapi.WithFileStore(store)),
		withTenants(batcher.Access{MaxPriority: batcher.PriorityUrgent}))
	url := e.tenantURL(t)
	create := func(tenant, purpose, name string) openaiapi.File {
		f, err := store.Create(tenant, purpose, name, strings.NewReader("{}\n"), 100)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var mine []openaiapi.File
	for i := range 3 {
		mine = append(mine, create("a", "batch", fmt.Sprintf("in%d.jsonl", i)))
	}
	output := create("a", "batch_output", "out.jsonl")
	mine = append(mine, output)
	theirs := create("b", "batch", "theirs.jsonl")
	// Newest first; files of one second by id, as the handler orders them.
	slices.SortFunc(mine, func(x, y openaiapi.File) int {
		return -cmp.Or(cmp.Compare(x.CreatedAt, y.CreatedAt), strings.Compare(x.ID, y.ID))
	})
	ids := func(fs []openaiapi.File) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	var batchIDs []string
	for _, f := range mine {
		if f.Purpose == "batch" {
			batchIDs = append(batchIDs, f.ID)
		}
	}
	client := openai.NewClient(option.WithBaseURL(url+"/"), option.WithAPIKey(testToken), option.WithMaxRetries(0),
		option.WithHeader(tenantHeader, "a"))
	sdkIDs := func(page *pagination.CursorPage[openai.FileObject]) []string {
		var out []string
		if page == nil {
			return nil
		}
		for _, f := range page.Data {
			out = append(out, f.ID)
		}
		return out
	}

	page, err := client.Files.List(testCtx(t), openai.FileListParams{})
	if err != nil || !slices.Equal(sdkIDs(page), ids(mine)) || page.HasMore {
		t.Fatalf("list: %v, has_more %v, %v; want %v", sdkIDs(page), page != nil && page.HasMore, err, ids(mine))
	}
	// status is deprecated in the SDK but still on OpenAI's wire: read it raw.
	if f := page.Data[0]; f.Object != "file" || f.Bytes != 3 || f.JSON.Status.Raw() != `"processed"` || f.CreatedAt != mine[0].CreatedAt || f.Filename != mine[0].Filename {
		t.Errorf("first file %+v, want %+v", f, mine[0])
	}
	// The SDK's pager, a file a page: every file once, in order.
	var paged []string
	iter := client.Files.ListAutoPaging(testCtx(t), openai.FileListParams{Limit: openai.Int(1)})
	for iter.Next() {
		paged = append(paged, iter.Current().ID)
	}
	if iter.Err() != nil || !slices.Equal(paged, ids(mine)) {
		t.Errorf("paged a file at a time: %v, %v; want %v", paged, iter.Err(), ids(mine))
	}
	oldest := ids(mine)
	slices.Reverse(oldest)
	page, err = client.Files.List(testCtx(t), openai.FileListParams{Order: openai.FileListParamsOrderAsc})
	if err != nil || !slices.Equal(sdkIDs(page), oldest) {
		t.Errorf("order asc: %v, %v; want %v", sdkIDs(page), err, oldest)
	}
	page, err = client.Files.List(testCtx(t), openai.FileListParams{Purpose: openai.String("batch"), Limit: openai.Int(2)})
	if err != nil || !slices.Equal(sdkIDs(page), batchIDs[:2]) || !page.HasMore {
		t.Errorf("purpose batch, limit 2: %v, has_more %v, %v; want %v and more", sdkIDs(page), page != nil && page.HasMore, err, batchIDs[:2])
	}
	page, err = client.Files.List(testCtx(t), openai.FileListParams{Purpose: openai.String("batch"), After: openai.String(batchIDs[1])})
	if err != nil || !slices.Equal(sdkIDs(page), batchIDs[2:]) || page.HasMore {
		t.Errorf("purpose batch after the second: %v, %v; want %v", sdkIDs(page), err, batchIDs[2:])
	}
	// A cursor of another purpose still marks a place in the order.
	page, err = client.Files.List(testCtx(t), openai.FileListParams{Purpose: openai.String("batch_output")})
	if err != nil || !slices.Equal(sdkIDs(page), []string{output.ID}) {
		t.Errorf("purpose batch_output: %v, %v; want %s", sdkIDs(page), err, output.ID)
	}

	// The wire shape, and an empty page's.
	code, _, body := send(t, http.MethodGet, url+"/files?limit=1", "", tenantHeader, "a")
	var list struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		FirstID *string           `json:"first_id"`
		LastID  *string           `json:"last_id"`
		HasMore *bool             `json:"has_more"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || list.Object != "list" || len(list.Data) != 1 ||
		list.FirstID == nil || *list.FirstID != mine[0].ID || list.LastID == nil || *list.LastID != mine[0].ID || list.HasMore == nil || !*list.HasMore {
		t.Errorf("limit=1: %d %s", code, body)
	}
	code, _, body = send(t, http.MethodGet, url+"/files?purpose=vision", "", tenantHeader, "a")
	if code != 200 || !strings.Contains(body, `"data":[]`) || !strings.Contains(body, `"first_id":null`) || !strings.Contains(body, `"has_more":false`) {
		t.Errorf("no file of that purpose: %d %s", code, body)
	}
	// Each tenant its own; no tenant (batcherd without tenants) every file.
	for _, tc := range []struct {
		tenant string
		want   []string
	}{{"b", []string{theirs.ID}}, {"c", nil}, {"", append(ids(mine), theirs.ID)}} {
		code, _, body := send(t, http.MethodGet, url+"/files", "", tenantHeader, tc.tenant)
		var got struct{ Data []struct{ ID string } }
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("tenant %q: %d %s", tc.tenant, code, body)
		}
		var gotIDs []string
		for _, f := range got.Data {
			gotIDs = append(gotIDs, f.ID)
		}
		slices.Sort(gotIDs)
		slices.Sort(tc.want)
		if !slices.Equal(gotIDs, tc.want) {
			t.Errorf("tenant %q lists %v, want %v", tc.tenant, gotIDs, tc.want)
		}
	}

	for _, tc := range []struct{ query, param, msg string }{
		{"limit=0", "limit", "from 1 to 10000"},
		{"limit=10001", "limit", "from 1 to 10000"},
		{"limit=ten", "limit", "from 1 to 10000"},
		{"order=newest", "order", "asc or desc"},
		{"purpose=fine_tune", "purpose", "batch_output"},
		{"after=file-000000000000000000000000", "after", "names no file"},
		{"after=" + theirs.ID, "after", "names no file"}, // another tenant's: as if none
		{"before=x", "before", "takes purpose, limit, order and after"},
		{"limit=1&limit=2", "limit", "once"},
	} {
		code, _, body := send(t, http.MethodGet, url+"/files?"+tc.query, "", tenantHeader, "a")
		if code != http.StatusBadRequest || !strings.Contains(body, `"param":"`+tc.param+`"`) || !strings.Contains(body, tc.msg) {
			t.Errorf("?%s: %d %s; want 400 with param %s and %q", tc.query, code, body, tc.param, tc.msg)
		}
		checkErrorShape(t, body)
	}
	_, err = client.Files.List(testCtx(t), openai.FileListParams{Limit: openai.Int(20000)})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "limit" {
		t.Errorf("SDK limit 20000: %d param %q", ae.StatusCode, ae.Param)
	}
	code, h, body := send(t, http.MethodPut, url+"/files", "", tenantHeader, "a")
	if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, POST" {
		t.Errorf("PUT /files: %d Allow %q %s", code, h.Get("Allow"), body)
	}
	code, h, _ = send(t, http.MethodPost, url+"/files/"+output.ID, "{}", tenantHeader, "a")
	if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, DELETE" {
		t.Errorf("POST /files/{id}: %d Allow %q", code, h.Get("Allow"))
	}

	// A deleted file leaves the list; another tenant cannot delete one.
	if _, err := client.Files.Delete(testCtx(t), theirs.ID); apiError(t, err).StatusCode != http.StatusNotFound {
		t.Errorf("deleting another tenant's file: %v, want 404", err)
	}
	if del, err := client.Files.Delete(testCtx(t), output.ID); err != nil || !del.Deleted || del.ID != output.ID || del.Object != "file" {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	page, err = client.Files.List(testCtx(t), openai.FileListParams{})
	if err != nil || slices.Contains(sdkIDs(page), output.ID) || len(page.Data) != 3 {
		t.Errorf("after delete: %v, %v", sdkIDs(page), err)
	}
}

// TestFilesListAfterDeleted: a caller that pages through its files a file
// a page with the SDK's pager, deleting each file as it reads it, sees
// every file once: the next page's after names a file just deleted, which
// keeps its place in the order for TombstoneTTL. Another tenant's deleted
// file, and one whose tombstone has expired, name no file (400).
func TestFilesListAfterDeleted(t *testing.T) {
	dir := t.TempDir()
	store, err := openaiapi.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, newFake(), func(c *envConfig) { c.noFiles = true }, withHandler(openaiapi.WithFileStore(store)),
		withTenants(batcher.Access{MaxPriority: batcher.PriorityUrgent}))
	url := e.tenantURL(t)
	var want []string
	for i := range 4 {
		f, err := store.Create("a", "batch", fmt.Sprintf("in%d.jsonl", i), strings.NewReader("{}\n"), 100)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, f.ID)
	}
	theirs, err := store.Create("b", "batch", "theirs.jsonl", strings.NewReader("{}\n"), 100)
	if err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL(url+"/"), option.WithAPIKey(testToken), option.WithMaxRetries(0),
		option.WithHeader(tenantHeader, "a"))
	var seen []string
	iter := client.Files.ListAutoPaging(testCtx(t), openai.FileListParams{Limit: openai.Int(1), Order: openai.FileListParamsOrderAsc})
	for iter.Next() {
		id := iter.Current().ID
		seen = append(seen, id)
		if _, err := client.Files.Delete(testCtx(t), id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	slices.Sort(seen)
	slices.Sort(want)
	if iter.Err() != nil || !slices.Equal(seen, want) {
		t.Fatalf("paged deleting each: %v, %v; want every file once: %v", seen, iter.Err(), want)
	}
	if err := store.Delete(theirs.ID); err != nil {
		t.Fatal(err)
	}
	code, _, body := send(t, http.MethodGet, url+"/files?after="+theirs.ID, "", tenantHeader, "a")
	if code != http.StatusBadRequest || !strings.Contains(body, `"param":"after"`) {
		t.Errorf("after another tenant's deleted file: %d %s, want 400 naming after", code, body)
	}
	// An expired tombstone goes at the next list, and its id with it.
	old := time.Now().Add(-openaiapi.TombstoneTTL - time.Minute)
	if err := os.Chtimes(filepath.Join(dir, want[0]+".deleted"), old, old); err != nil {
		t.Fatal(err)
	}
	if code, _, body := send(t, http.MethodGet, url+"/files", "", tenantHeader, "a"); code != 200 || !strings.Contains(body, `"data":[]`) {
		t.Fatalf("list: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(dir, want[0]+".deleted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("expired tombstone: %v, want it removed", err)
	}
	code, _, body = send(t, http.MethodGet, url+"/files?after="+want[0], "", tenantHeader, "a")
	if code != http.StatusBadRequest || !strings.Contains(body, `"param":"after"`) || !strings.Contains(body, "deleted more than 24h0m0s ago") {
		t.Errorf("after an expired tombstone: %d %s, want 400 naming after", code, body)
	}
	if code, _, body := send(t, http.MethodGet, url+"/files?after="+want[1], "", tenantHeader, "a"); code != 200 {
		t.Errorf("after a fresh tombstone: %d %s, want 200", code, body)
	}
}

// A form field POST /v1/files does not read (OpenAI's expires_after, a
// typo) is refused naming it, and nothing is stored: Batcher keeps files
// by its own rule, not the one the caller asked for.
func TestFilesUnknownFormField(t *testing.T) {
	e := newEnv(t, newFake())
	for _, order := range []string{"before", "after"} {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("purpose", "batch")
		if order == "before" {
			_ = mw.WriteField("expires_after[seconds]", "3600")
		}
		fw, _ := mw.CreateFormFile("file", "x.jsonl")
		_, _ = fw.Write([]byte(batchJSONL))
		if order == "after" {
			_ = mw.WriteField("expires_after[seconds]", "3600")
		}
		_ = mw.Close()
		code, _, body := e.post(t, "/files", b.String(), "Content-Type", mw.FormDataContentType())
		if code != http.StatusBadRequest || !strings.Contains(body, `"param":"expires_after[seconds]"`) {
			t.Errorf("unknown field %s the file: %d %s; want 400 naming expires_after[seconds]", order, code, body)
		}
		checkErrorShape(t, body)
	}
	if left, err := os.ReadDir(e.dir); err != nil || len(left) != 0 {
		t.Errorf("refused uploads left %d entries in the store (%v): %v", len(left), err, left)
	}
}
