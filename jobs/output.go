package jobs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The files of a job's output directory.
const (
	ResultsFile = "results.jsonl"
	ErrorsFile  = "errors.jsonl"
	SummaryFile = "summary.json"
	// posFile holds the done number up to which both files are complete.
	posFile = "output.pos"
)

// JobDir returns a job's output directory under dataDir, for a job whose
// spec chose none (Manager.Dir has every job's).
func JobDir(dataDir, id string) string { return filepath.Join(dataDir, jobsSubdir(id)) }

// jobsSubdir is a job's default output directory, relative to the data
// directory.
func jobsSubdir(id string) string { return filepath.Join("jobs", id) }

// output appends a job's finished tasks to results.jsonl and errors.jsonl
// in done-number order. The database is the truth: on open, each file is
// cut back to its last whole line, and the done number that line carries
// says which tasks the file already holds, so that a resumed job neither
// repeats nor drops a line. One goroutine (the job's runner) owns it.
type output struct {
	dir  string   // for messages
	root *os.Root // the directory: every file is opened through it
	pos  int64    // every task up to this done number is in its file
	file [2]*outFile
}

type outFile struct {
	f    *os.File
	w    *bufio.Writer
	last int64 // done number of the file's last line
}

// openOutput opens the output files in dir, a relative directory under
// base, creating it. Every file is opened through an os.Root, so that
// neither ".." nor a symbolic link leads the files out of base.
func openOutput(base, dir string) (*output, error) {
	br, err := os.OpenRoot(base)
	if err != nil {
		return nil, fmt.Errorf("jobs: output directory: %w", err)
	}
	defer func() { _ = br.Close() }()
	if err := br.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("jobs: output directory: %w", err)
	}
	root, err := br.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("jobs: output directory: %w", err)
	}
	o := &output{dir: filepath.Join(base, dir), root: root}
	if b, err := root.ReadFile(posFile); err == nil {
		o.pos, _ = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	}
	for i, name := range []string{ResultsFile, ErrorsFile} {
		f, last, err := openAppend(root, name, filepath.Join(o.dir, name))
		if err != nil {
			o.close()
			return nil, err
		}
		o.file[i] = &outFile{f: f, w: bufio.NewWriterSize(f, 256<<10), last: last}
	}
	return o, nil
}

// openAppend opens path for appending after its last whole line, cutting a
// torn tail, and returns the done number of that line (0: none).
func openAppend(root *os.Root, name, path string) (*os.File, int64, error) {
	f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("jobs: opening %s: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	// Read back from the end until the last two newlines are found.
	var tail []byte
	for off := size; off > 0 && bytes.Count(tail, []byte{'\n'}) < 2; {
		n := min(off, 64<<10)
		off -= n
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil {
			_ = f.Close()
			return nil, 0, err
		}
		tail = append(buf, tail...)
	}
	end := bytes.LastIndexByte(tail, '\n') + 1 // keep up to the last newline
	keep := size - int64(len(tail)) + int64(end)
	if keep != size {
		if err := f.Truncate(keep); err != nil {
			_ = f.Close()
			return nil, 0, fmt.Errorf("jobs: cutting the torn tail of %s: %w", path, err)
		}
	}
	if _, err := f.Seek(keep, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	var last int64
	if end > 0 {
		line := tail[:end-1]
		line = line[bytes.LastIndexByte(line, '\n')+1:]
		if last = parseLineID(line); last < 0 {
			_ = f.Close()
			return nil, 0, fmt.Errorf("jobs: %s: last line has no batch_req id", path)
		}
	}
	return f, last, nil
}

// write appends the tasks (in done order) that their file lacks, then
// flushes both files and records the position. On an error (a full disk)
// the lines written before it stay; the torn tail is cut at the next open.
func (o *output) write(j *Job, tasks []Task) error {
	if len(tasks) == 0 {
		return nil
	}
	now := time.Now()
	for i := range tasks {
		t := &tasks[i]
		line, isErr := formatLine(j, t, now)
		of := o.file[0]
		if isErr {
			of = o.file[1]
		}
		if t.DoneSeq <= of.last {
			continue // written before a restart
		}
		_, _ = of.w.Write(line) // a write error sticks: WriteByte reports it
		if err := of.w.WriteByte('\n'); err != nil {
			return o.fail(err)
		}
		of.last = t.DoneSeq
	}
	for _, of := range o.file {
		if err := of.w.Flush(); err != nil {
			return o.fail(err)
		}
	}
	o.pos = tasks[len(tasks)-1].DoneSeq
	if err := o.root.WriteFile(posFile, strconv.AppendInt(nil, o.pos, 10), 0o644); err != nil {
		return o.fail(err)
	}
	return nil
}

func (o *output) fail(err error) error {
	return fmt.Errorf("writing the output in %s: %w", o.dir, err)
}

// sync makes the files durable.
func (o *output) sync() error {
	var errs []error
	for _, of := range o.file {
		if of != nil {
			errs = append(errs, of.w.Flush(), of.f.Sync())
		}
	}
	return errors.Join(errs...)
}

func (o *output) close() {
	for _, of := range o.file {
		if of != nil {
			_ = of.w.Flush()
			_ = of.f.Close()
		}
	}
	_ = o.root.Close()
}

// Summary is summary.json, written when a job ends.
type Summary struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	State     string            `json:"state"`
	Error     string            `json:"error,omitempty"`
	Counts    Counts            `json:"counts"`
	Groups    map[string]Counts `json:"groups,omitempty"`
	Invalid   int64             `json:"invalid"`
	TokensIn  int64             `json:"tokens_in"`
	TokensOut int64             `json:"tokens_out"`
	// Cost is what the job cost in USD at its routes' price tables;
	// Saving what it saved against online dispatch of the same tokens.
	Cost      float64           `json:"cost_usd"`
	Saving    float64           `json:"saving_usd"`
	CreatedAt time.Time         `json:"created_at"`
	StartedAt time.Time         `json:"started_at"`
	EndedAt   time.Time         `json:"ended_at"`
	Seconds   float64           `json:"seconds"`
	Files     map[string]string `json:"files"`
}

func writeSummary(dir *os.Root, j *Job) error {
	s := Summary{ID: j.ID, Name: j.Spec.Name, State: j.State.String(), Error: j.Error, Counts: j.Counts, Invalid: j.Invalid,
		TokensIn: j.TokensIn, TokensOut: j.TokensOut, Cost: j.Cost, Saving: j.Saving(), CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, EndedAt: j.EndedAt,
		Files: map[string]string{"results": ResultsFile, "errors": ErrorsFile}}
	if !j.StartedAt.IsZero() && !j.EndedAt.IsZero() {
		s.Seconds = j.EndedAt.Sub(j.StartedAt).Seconds()
	}
	for g, c := range j.Groups {
		if name := j.GroupName(g); name != "" {
			if s.Groups == nil {
				s.Groups = map[string]Counts{}
			}
			s.Groups[name] = c
		}
	}
	b, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		return err
	}
	tmp := SummaryFile + ".tmp"
	if err := dir.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return dir.Rename(tmp, SummaryFile)
}
