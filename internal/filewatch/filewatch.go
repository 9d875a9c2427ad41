// Package filewatch tells when a set of files changed, by polling their
// size, modification time and inode: an edit in place and an atomic
// rename (a Kubernetes ConfigMap's symlink swap) both show. Polling, not
// inotify: it sees a file replaced under a watched directory's symlink,
// and costs a stat per file per poll.
package filewatch

import (
	"os"
	"slices"
	"time"
)

// Set tells when a set of files changed since it was last loaded, or
// last failed to load: a bad file is tried once per change, not once per
// poll, so that its error is logged once. Its owner serializes calls.
type Set struct {
	names []string
	ok    []Stamp // the set in force
	bad   []Stamp // the set that last failed
}

// New returns a Set of the named files, none loaded yet.
func New(names ...string) Set { return Set{names: names} }

// Changed stats the files and returns their stamps and whether they are
// to be loaded: force, or different from both the set in force and the
// set that last failed.
func (w *Set) Changed(force bool) ([]Stamp, bool, error) {
	stamps, err := stat(w.names)
	if err != nil {
		return nil, false, err
	}
	if force {
		return stamps, true, nil
	}
	return stamps, !slices.Equal(stamps, w.ok) && !slices.Equal(stamps, w.bad), nil
}

// Done records the outcome of loading the set with those stamps.
func (w *Set) Done(stamps []Stamp, err error) {
	if err != nil {
		w.bad = stamps
		return
	}
	w.ok, w.bad = stamps, nil
}

// Stamp is what tells a changed file: an atomic rename changes the
// inode, an edit in place the size or modification time.
type Stamp struct {
	name    string
	size    int64
	modTime time.Time
	ino     uint64
}

func stat(names []string) ([]Stamp, error) {
	stamps := make([]Stamp, len(names))
	for i, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			return nil, err
		}
		stamps[i] = Stamp{name: n, size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}
	}
	return stamps, nil
}
