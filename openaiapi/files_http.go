package openaiapi

import (
	"cmp"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FilePurposeBatch is the one purpose served: input for the batch API.
const FilePurposeBatch = "batch"

// maxFormField bounds a multipart form's text fields (purpose).
const maxFormField = 1 << 10

// errNoFileStore answers the files endpoints when no store is configured.
var errNoFileStore = &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "files_not_configured",
	Message: "file storage is not configured on this server (set its data directory)"}

// uploadFile serves POST /v1/files: a multipart form with a purpose and a
// file, as the SDKs send it. The file must be JSONL (purpose batch); any
// other field is refused by name.
func (h *Handler) uploadFile(w http.ResponseWriter, r *http.Request) {
	store := h.cfg.files
	if store == nil {
		WriteError(w, errNoFileStore)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		WriteError(w, badRequest("", "want a multipart/form-data body with the fields purpose and file"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.maxFile+64<<10) // room for the form's framing
	mr, err := r.MultipartReader()
	if err != nil {
		WriteError(w, badRequest("", "malformed multipart body: %s", multipartCause(err)))
		return
	}
	var (
		purpose string
		stored  *File
	)
	remove := func() {
		if stored != nil {
			_ = store.Discard(stored.ID)
		}
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			remove()
			WriteError(w, bodyError(err, h.cfg.maxFile))
			return
		}
		switch part.FormName() {
		case "purpose":
			b, err := io.ReadAll(io.LimitReader(part, maxFormField))
			if err != nil {
				remove()
				WriteError(w, bodyError(err, h.cfg.maxFile))
				return
			}
			purpose = strings.TrimSpace(string(b))
		case "file":
			if stored != nil {
				remove()
				WriteError(w, badRequest("file", "must be given once"))
				return
			}
			if purpose != "" && purpose != FilePurposeBatch {
				break // refused below, without storing the file
			}
			f, err := store.Create(TenantOf(r.Context()), FilePurposeBatch, part.FileName(), part, h.cfg.maxFile)
			if err != nil {
				WriteError(w, bodyError(err, h.cfg.maxFile))
				return
			}
			stored = &f
		default: // not dropped: the caller asked for something not served
			name := part.FormName()
			_ = part.Close()
			remove()
			WriteError(w, badRequest(truncate(name), "is not a field of POST /v1/files, which reads purpose and file"))
			return
		}
		_ = part.Close()
	}
	switch {
	case purpose == "":
		remove()
		WriteError(w, badRequest("purpose", "must be set: %s", FilePurposeBatch))
		return
	case purpose != FilePurposeBatch:
		remove()
		WriteError(w, badRequest("purpose", "must be %s: Batcher stores batch input only, got %q", FilePurposeBatch, truncate(purpose)))
		return
	case stored == nil:
		WriteError(w, badRequest("file", "must be set: the JSONL file to upload (a form field named file)"))
		return
	}
	_, content, err := store.Open(stored.ID)
	if err == nil {
		err = checkJSONL(content, h.cfg.maxDepth)
		_ = content.Close()
		if err != nil {
			remove()
			WriteError(w, badRequest("file", "must be JSONL, one request object a line: %v", err))
			return
		}
	}
	if err != nil {
		remove()
		h.cfg.logger.Error("openai: checking an uploaded file", "err", err)
		WriteError(w, err)
		return
	}
	writeJSON(w, stored)
}

// multipartCause is a multipart reader's error without the Go package's
// prefixes ("multipart: NextPart: "), which name code, not the cause.
func multipartCause(err error) string {
	msg := err.Error()
	for _, p := range []string{"multipart: ", "NextPart: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// bodyError answers a failure to read or store an upload.
func bodyError(err error, limit int64) *Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, ErrFileTooLarge) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "file_too_large", Param: "file",
			Message: "file larger than " + strconv.FormatInt(limit, 10) + " bytes"}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badRequest("", "malformed multipart body: it ends before the form's closing boundary")
	}
	if strings.Contains(err.Error(), "multipart") {
		return badRequest("", "malformed multipart body: %s", multipartCause(err))
	}
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: "storing the file failed"}
}

// deleteFile serves DELETE /v1/files/{id}.
func (h *Handler) deleteFile(w http.ResponseWriter, r *http.Request, id string) {
	if h.cfg.files == nil {
		WriteError(w, errNoFileStore)
		return
	}
	if _, err := h.stat(r, id); err != nil {
		WriteError(w, h.fileError(err, id))
		return
	}
	if err := h.cfg.files.Delete(id); err != nil {
		WriteError(w, h.fileError(err, id))
		return
	}
	writeJSON(w, &fileDeleted{ID: id, Object: "file", Deleted: true})
}

type fileDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// getFile serves GET /v1/files/{id}.
func (h *Handler) getFile(w http.ResponseWriter, r *http.Request, id string) {
	if h.cfg.files == nil {
		WriteError(w, errNoFileStore)
		return
	}
	f, err := h.stat(r, id)
	if err != nil {
		WriteError(w, h.fileError(err, id))
		return
	}
	writeJSON(w, &f)
}

// fileContent serves GET /v1/files/{id}/content.
func (h *Handler) fileContent(w http.ResponseWriter, r *http.Request, id string) {
	if h.cfg.files == nil {
		WriteError(w, errNoFileStore)
		return
	}
	f, c, err := h.cfg.files.Open(id)
	if err == nil && !f.VisibleTo(TenantOf(r.Context())) {
		_ = c.Close()
		err = ErrFileNotFound
	}
	if err != nil {
		WriteError(w, h.fileError(err, id))
		return
	}
	defer func() { _ = c.Close() }() // read only
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, c)
}

// stat returns the file's description when the caller's tenant may see
// it, and ErrFileNotFound, as for an unknown id, when it may not.
func (h *Handler) stat(r *http.Request, id string) (File, error) {
	f, err := h.cfg.files.Stat(id)
	if err == nil && !f.VisibleTo(TenantOf(r.Context())) {
		return File{}, ErrFileNotFound
	}
	return f, err
}

func (h *Handler) fileError(err error, id string) *Error {
	if errors.Is(err, ErrFileNotFound) {
		return notFound("id", "file_not_found", "No such File object: %s", truncate(id))
	}
	h.cfg.logger.Error("openai: reading a file", "id", truncate(id), "err", err)
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: "reading the file failed"}
}

// MaxFileListLimit is the most files one page of GET /v1/files holds, and
// the page's size when limit is not given: OpenAI's 10,000.
const MaxFileListLimit = 10000

// filePurposes are the purposes OpenAI documents for files, which GET
// /v1/files takes as a filter. Batcher stores batch (uploads) and
// batch_output (a batch's output and error files); the others list none.
var filePurposes = []string{"assistants", "assistants_output", "batch", "batch_output", "fine-tune", "fine-tune-results", "vision", "user_data"}

// fileListQuery is what GET /v1/files was asked.
type fileListQuery struct {
	purpose string // "": any
	limit   int
	asc     bool // order=asc: oldest first
	after   string
}

// fileListParams are the query parameters of GET /v1/files.
var fileListParams = []string{"purpose", "limit", "order", "after"}

// parseFileListQuery reads GET /v1/files's query: purpose, limit, order
// and after, each at most once; anything else is refused by name.
func parseFileListQuery(raw string) (fileListQuery, *Error) {
	q := fileListQuery{limit: MaxFileListLimit}
	vals, e := checkQuery(raw, "GET /v1/files", fileListParams...)
	if e != nil {
		return q, e
	}
	if v := vals.Get("purpose"); v != "" {
		if !slices.Contains(filePurposes, v) {
			return q, badRequest("purpose", "purpose must be one of %s, got %q", strings.Join(filePurposes, ", "), truncate(v))
		}
		q.purpose = v
	}
	if v, ok := vals["limit"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v[0]))
		if err != nil || n < 1 || n > MaxFileListLimit {
			return q, badRequest("limit", "limit must be a whole number from 1 to %d, got %q", MaxFileListLimit, truncate(v[0]))
		}
		q.limit = n
	}
	switch v := vals.Get("order"); v {
	case "", "desc":
	case "asc":
		q.asc = true
	default:
		return q, badRequest("order", "order must be asc or desc, got %q", truncate(v))
	}
	q.after = vals.Get("after")
	return q, nil
}

type fileList struct {
	Object  string  `json:"object"` // always "list"
	Data    []File  `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// listFiles serves GET /v1/files: the caller's files (its tenant's, as
// for the other file routes), by created_at newest first (order=asc:
// oldest first; ties by id), at most limit of them, starting after the
// file named by after (the last id of the previous page, as the SDKs'
// pagers send it; a file deleted since, within TombstoneTTL, keeps its
// place, so that a caller deleting each file of a page can ask for the
// next). An after that names no file of the caller's is a 400 naming
// after.
func (h *Handler) listFiles(w http.ResponseWriter, r *http.Request) {
	store := h.cfg.files
	if store == nil {
		WriteError(w, errNoFileStore)
		return
	}
	q, e := parseFileListQuery(r.URL.RawQuery)
	if e != nil {
		WriteError(w, e)
		return
	}
	files, err := store.List(TenantOf(r.Context()), q.purpose)
	if err != nil {
		h.cfg.logger.Error("openai: listing files", "err", err)
		WriteError(w, &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: "listing the files failed"})
		return
	}
	order := func(a, b *File) int {
		c := cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
		if !q.asc {
			return -c
		}
		return c
	}
	slices.SortFunc(files, func(a, b File) int { return order(&a, &b) })
	if q.after != "" {
		// The cursor's place in the order, from its own description: it
		// need not have the purpose asked for.
		cursor, err := store.Cursor(q.after)
		if err == nil && !cursor.VisibleTo(TenantOf(r.Context())) {
			err = ErrFileNotFound
		}
		if errors.Is(err, ErrFileNotFound) {
			WriteError(w, badRequest("after", "after %q names no file (or one deleted more than %v ago): pass the id of the last file of the previous page",
				truncate(q.after), TombstoneTTL))
			return
		}
		if err != nil {
			WriteError(w, h.fileError(err, q.after))
			return
		}
		i, _ := slices.BinarySearchFunc(files, &cursor, func(f File, c *File) int { return order(&f, c) })
		for i < len(files) && order(&files[i], &cursor) <= 0 {
			i++
		}
		files = files[i:]
	}
	out := fileList{Object: "list", Data: files}
	if len(files) > q.limit {
		out.Data, out.HasMore = files[:q.limit], true
	}
	if out.Data == nil {
		out.Data = []File{}
	}
	if n := len(out.Data); n > 0 {
		first, last := out.Data[0].ID, out.Data[n-1].ID
		out.FirstID, out.LastID = &first, &last
	}
	writeJSON(w, &out)
}
