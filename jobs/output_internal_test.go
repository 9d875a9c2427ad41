package jobs

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func outTask(done int64, ok bool) Task {
	t := Task{Seq: done, CustomID: "c", DoneSeq: done, State: ItemSucceeded, Result: encode(&Record{Text: "out"})}
	if !ok {
		t.State, t.Result = ItemFailed, encode(&Record{ErrCode: CodeServerError, ErrMessage: "boom"})
	}
	return t
}

func fileIDs(t *testing.T, path string) []int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var ids []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id := parseLineID(sc.Bytes())
		if id < 0 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		ids = append(ids, id)
	}
	return ids
}

// A torn last line (kill -9 mid-write) is cut on open, and each file goes
// on after the done number of its last whole line: nothing is repeated,
// nothing dropped.
func TestOutputResumesAfterATornLine(t *testing.T) {
	dir := t.TempDir()
	j := &Job{ID: "job_x"}
	o, err := openOutput(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.write(j, []Task{outTask(1, true), outTask(2, false), outTask(3, true)}); err != nil {
		t.Fatal(err)
	}
	o.close()
	// The crash: line 4 was written whole but the position not recorded,
	// and line 5 only in part.
	res := filepath.Join(dir, ResultsFile)
	f, err := os.OpenFile(res, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t4 := outTask(4, true)
	line, _ := formatLine(j, &t4, time.Now())
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"id":"batch_req_5","custom_id":"c","resp`); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	o, err = openOutput(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	if o.pos != 3 || o.file[0].last != 4 || o.file[1].last != 2 {
		t.Fatalf("reopened at position %d, files at %d and %d; want 3, 4 and 2", o.pos, o.file[0].last, o.file[1].last)
	}
	// The runner resumes from the position: 4 comes again, and is skipped.
	if err := o.write(j, []Task{outTask(4, true), outTask(5, true), outTask(6, false)}); err != nil {
		t.Fatal(err)
	}
	o.close()
	if got := fileIDs(t, res); !slices.Equal(got, []int64{1, 3, 4, 5}) {
		t.Fatalf("results.jsonl ids %v, want 1 3 4 5", got)
	}
	if got := fileIDs(t, filepath.Join(dir, ErrorsFile)); !slices.Equal(got, []int64{2, 6}) {
		t.Fatalf("errors.jsonl ids %v, want 2 6", got)
	}
}

// A write that fails (a full disk) is reported, and what was written before
// it stays.
func TestOutputFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	dir := t.TempDir()
	o, err := openOutput(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	if err := o.write(&Job{}, []Task{outTask(1, true)}); err != nil {
		t.Fatal(err)
	}
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	kept := o.file[0].f
	o.file[0].f = full
	o.file[0].w.Reset(full)
	err = o.write(&Job{}, []Task{outTask(2, true)})
	if err == nil {
		t.Fatal("writing to a full disk succeeded")
	}
	t.Log(err)
	o.file[0].f = kept
	o.file[0].w.Reset(kept)
	if got := fileIDs(t, filepath.Join(dir, ResultsFile)); !slices.Equal(got, []int64{1}) {
		t.Fatalf("after the failure results.jsonl holds %v, want the line written before", got)
	}
}
