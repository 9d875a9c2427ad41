package openaiapi

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// ErrFileNotFound: no stored file has the id.
var ErrFileNotFound = errors.New("openaiapi: file not found")

// ErrFileTooLarge: the content passed the store's size limit.
var ErrFileTooLarge = errors.New("openaiapi: file too large")

// File describes a stored file, as OpenAI's file object does.
type File struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // always "file"
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"` // always "processed"
	// Tenant owns the file; "" is no tenant. It is stored beside the
	// description, never shown: see VisibleTo.
	Tenant string `json:"-"`
}

// VisibleTo reports whether a caller of tenant (from TenantOf; "" is
// unscoped, batcherd without tenants) may see f. Another tenant's file is
// answered as if it did not exist.
func (f *File) VisibleTo(tenant string) bool { return tenant == "" || f.Tenant == tenant }

// storedFile is a file's description as stored: the File and its owner.
type storedFile struct {
	File
	Owner string `json:"tenant,omitempty"`
}

func (s *FileStore) writeMeta(f *File) error {
	meta, _ := json.Marshal(&storedFile{File: *f, Owner: f.Tenant}) // a plain struct: never fails
	_, err := s.write(f.ID+".json", bytes.NewReader(meta))
	return err
}

// FileStore keeps uploaded files in a directory: each file's content as
// <id> and its description as <id>.json, both written to a temporary name
// and renamed, the description last, so that a file is visible only once
// complete. It is safe for concurrent use, also by several processes
// sharing the directory.
//
// The job API reads batch input files and writes output files through it.
type FileStore struct {
	dir string
	now func() time.Time
}

// OpenFileStore returns a store in dir, creating it (mode 0700) if need be.
func OpenFileStore(dir string) (*FileStore, error) {
	if dir == "" {
		return nil, errors.New("file store: directory must be set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	return &FileStore{dir: dir, now: time.Now}, nil
}

// fileIDPattern is what ids look like; anything else is not found, which
// also keeps paths inside the directory.
var fileIDPattern = regexp.MustCompile(`^file-[0-9a-f]{24}$`)

// Create stores r's content (at most limit bytes; past it ErrFileTooLarge)
// under a new id, owned by tenant ("": no tenant).
func (s *FileStore) Create(tenant, purpose, filename string, r io.Reader, limit int64) (File, error) {
	var raw [12]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	if filename = filepath.Base(filename); filename == "." || filename == string(filepath.Separator) {
		filename = "upload.jsonl" // none given
	}
	f := File{ID: "file-" + hex.EncodeToString(raw[:]), Object: "file", CreatedAt: s.now().Unix(),
		Filename: filename, Purpose: purpose, Status: "processed", Tenant: tenant}
	n, err := s.write(f.ID, io.LimitReader(r, limit+1))
	if err != nil {
		return File{}, err
	}
	if n > limit {
		_ = os.Remove(s.path(f.ID))
		return File{}, fmt.Errorf("%w: more than %d bytes", ErrFileTooLarge, limit)
	}
	f.Bytes = n
	if err := s.writeMeta(&f); err != nil {
		_ = os.Remove(s.path(f.ID))
		return File{}, err
	}
	return f, nil
}

// write writes r to name through a temporary file and a rename.
func (s *FileStore) write(name string, r io.Reader) (int64, error) {
	tmp, err := os.CreateTemp(s.dir, ".upload-*")
	if err != nil {
		return 0, fmt.Errorf("file store: %w", err)
	}
	n, err := io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path(name))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return 0, fmt.Errorf("file store: %w", err)
	}
	return n, nil
}

func (s *FileStore) path(name string) string { return filepath.Join(s.dir, name) }

// Stat returns the file's description, or ErrFileNotFound.
func (s *FileStore) Stat(id string) (File, error) {
	var sf storedFile
	if !fileIDPattern.MatchString(id) {
		return sf.File, ErrFileNotFound
	}
	data, err := os.ReadFile(s.path(id + ".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return sf.File, ErrFileNotFound
	}
	if err != nil {
		return sf.File, fmt.Errorf("file store: %w", err)
	}
	if err := json.Unmarshal(data, &sf); err != nil {
		return sf.File, fmt.Errorf("file store: %s: %w", id, err)
	}
	sf.Tenant = sf.Owner
	return sf.File, nil
}

// Open returns the file's description and its content; close it.
func (s *FileStore) Open(id string) (File, *os.File, error) {
	f, err := s.Stat(id)
	if err != nil {
		return f, nil, err
	}
	c, err := os.Open(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil, ErrFileNotFound
	}
	if err != nil {
		return f, nil, fmt.Errorf("file store: %w", err)
	}
	return f, c, nil
}

// List returns the description of every file tenant may see (VisibleTo;
// "" sees every file) whose purpose is purpose ("": any), in no particular
// order. A file deleted while List runs is left out. It reads every
// description in the directory.
func (s *FileStore) List(tenant, purpose string) ([]File, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	s.pruneTombstones(entries)
	var out []File
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !fileIDPattern.MatchString(id) {
			continue // content, or a write under way
		}
		f, err := s.Stat(id)
		if errors.Is(err, ErrFileNotFound) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return nil, err
		}
		if f.VisibleTo(tenant) && (purpose == "" || f.Purpose == purpose) {
			out = append(out, f)
		}
	}
	return out, nil
}

// TombstoneTTL is how long a deleted file's description is kept as its
// tombstone (<id>.deleted), for Cursor: long enough for a caller paging
// through its files and deleting each to ask for the page after one it
// deleted.
const TombstoneTTL = 24 * time.Hour

// Delete removes the file, or returns ErrFileNotFound. Its description
// stays, as a tombstone, for TombstoneTTL: Stat, Open and List no longer
// see it, Cursor does.
func (s *FileStore) Delete(id string) error {
	if _, err := s.Stat(id); err != nil {
		return err
	}
	tomb := s.path(id + ".deleted")
	if err := os.Rename(s.path(id+".json"), tomb); errors.Is(err, fs.ErrNotExist) {
		return ErrFileNotFound // deleted since Stat
	} else if err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	now := s.now()
	_ = os.Chtimes(tomb, now, now) // its age counts from the delete; at worst it goes sooner
	return s.remove(id)
}

// Discard removes a file no caller has seen (an upload refused after it
// was stored), leaving no tombstone.
func (s *FileStore) Discard(id string) error {
	if !fileIDPattern.MatchString(id) {
		return ErrFileNotFound
	}
	if err := os.Remove(s.path(id + ".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file store: %w", err)
	}
	return s.remove(id)
}

// remove removes the file's content.
func (s *FileStore) remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file store: %w", err)
	}
	return nil
}

// Cursor returns the description of the file named id for a list's after
// cursor: the file's, or, for one deleted less than TombstoneTTL ago, its
// tombstone's, so that the page after it still has its place in the
// order. Otherwise ErrFileNotFound.
func (s *FileStore) Cursor(id string) (File, error) {
	f, err := s.Stat(id)
	if !errors.Is(err, ErrFileNotFound) || !fileIDPattern.MatchString(id) {
		return f, err
	}
	var sf storedFile
	data, rerr := os.ReadFile(s.path(id + ".deleted"))
	if rerr != nil || json.Unmarshal(data, &sf) != nil {
		return f, err
	}
	sf.Tenant = sf.Owner
	return sf.File, nil
}

// pruneTombstones removes the tombstones among entries older than
// TombstoneTTL.
func (s *FileStore) pruneTombstones(entries []fs.DirEntry) {
	old := s.now().Add(-TombstoneTTL)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".deleted") {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(old) {
			_ = os.Remove(s.path(e.Name()))
		}
	}
}

// checkJSONL checks that every non-empty line of r is a JSON object nested
// at most maxDepth levels; the error names the first bad line.
func checkJSONL(r io.Reader, maxDepth int) error {
	br := bufio.NewReader(r)
	lines := 0
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			lines++
			if t[0] != '{' {
				return fmt.Errorf("line %d: want a JSON object", n)
			}
			if e := checkDepth(t, maxDepth); e != nil {
				return fmt.Errorf("line %d: %s", n, e.Message)
			}
			if !json.Valid(t) {
				var v any
				derr := json.Unmarshal(t, &v)
				var se *json.SyntaxError
				if errors.As(derr, &se) {
					return fmt.Errorf("line %d, column %d: malformed JSON: %s", n, se.Offset, se.Error())
				}
				return fmt.Errorf("line %d: malformed JSON", n)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if lines == 0 {
		return errors.New("the file holds no JSON lines")
	}
	return nil
}

// Adopt registers the file at path under id (which must look like a file
// id), hard-linking it into the store or, across file systems, copying it.
// The batch API uses it to serve a job's output files under ids derived
// from the job's, owned by the job's tenant. Adopting an id again replaces
// its description only.
func (s *FileStore) Adopt(tenant, id, purpose, filename, path string) (File, error) {
	if !fileIDPattern.MatchString(id) {
		return File{}, fmt.Errorf("file store: %q is not a file id", id)
	}
	st, err := os.Stat(path)
	if err != nil {
		return File{}, fmt.Errorf("file store: %w", err)
	}
	if err := os.Link(path, s.path(id)); err != nil && !errors.Is(err, fs.ErrExist) {
		src, oerr := os.Open(path)
		if oerr != nil {
			return File{}, fmt.Errorf("file store: %w", oerr)
		}
		_, err = s.write(id, src)
		_ = src.Close()
		if err != nil {
			return File{}, err
		}
	}
	f := File{ID: id, Object: "file", Bytes: st.Size(), CreatedAt: s.now().Unix(), Filename: filepath.Base(filename),
		Purpose: purpose, Status: "processed", Tenant: tenant}
	if err := s.writeMeta(&f); err != nil {
		return File{}, err
	}
	return f, nil
}
