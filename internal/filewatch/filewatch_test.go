package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSet: a file loaded is not changed until it is edited or replaced; a
// set that failed to load is not tried again until it changes again; a
// missing file is an error; force always loads.
func TestSet(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	write := func(data string, mtime time.Time) {
		t.Helper()
		tmp := name + ".tmp"
		if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, name); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Unix(1_700_000_000, 0)
	write("one", at)
	s := New(name)
	stamps, load, err := s.Changed(false)
	if err != nil || !load {
		t.Fatalf("first look: load %v, err %v; want a load", load, err)
	}
	s.Done(stamps, nil)
	if _, load, _ := s.Changed(false); load {
		t.Fatal("an unchanged file was to be loaded again")
	}
	if _, load, _ := s.Changed(true); !load {
		t.Fatal("force did not load")
	}

	// Same size and time, a new inode: an atomic rename shows.
	write("two", at)
	stamps, load, _ = s.Changed(false)
	if !load {
		t.Fatal("a file renamed over the old one was not seen")
	}
	s.Done(stamps, errors.New("bad"))
	if _, load, _ := s.Changed(false); load {
		t.Fatal("a set that failed was tried again without a change")
	}

	// Edited in place: the size shows.
	if err := os.WriteFile(name, []byte("three!"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, load, _ := s.Changed(false); !load {
		t.Fatal("an edit in place was not seen")
	}

	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Changed(false); err == nil {
		t.Fatal("a missing file was not an error")
	}
}
