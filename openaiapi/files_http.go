package openaiapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
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
// file, as the SDKs send it. The file must be JSONL (purpose batch).
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
			_ = store.Delete(stored.ID)
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
