package security

import (
	"os"
	"time"
)

// watched tells when a set of files changed since it was last loaded, or
// last failed to load: a bad file is tried once per change, not once per
// poll, so that its error is logged once. Its owner serializes calls.
type watched struct {
	names []string
	ok    []fileStamp // the set in force
	bad   []fileStamp // the set that last failed
}

// changed stats the files and returns their stamps and whether they are
// to be loaded: force, or different from both the set in force and the
// set that last failed.
func (w *watched) changed(force bool) ([]fileStamp, bool, error) {
	stamps, err := stat(w.names)
	if err != nil {
		return nil, false, err
	}
	if force {
		return stamps, true, nil
	}
	return stamps, !sameStamps(stamps, w.ok) && !sameStamps(stamps, w.bad), nil
}

// done records the outcome of loading the set with those stamps.
func (w *watched) done(stamps []fileStamp, err error) {
	if err != nil {
		w.bad = stamps
		return
	}
	w.ok, w.bad = stamps, nil
}

// fileStamp is what tells a changed file: an atomic rename changes the
// inode, an edit in place the size or modification time.
type fileStamp struct {
	name    string
	size    int64
	modTime time.Time
	ino     uint64
}

func stat(names []string) ([]fileStamp, error) {
	stamps := make([]fileStamp, len(names))
	for i, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			return nil, err
		}
		stamps[i] = fileStamp{name: n, size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}
	}
	return stamps, nil
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
