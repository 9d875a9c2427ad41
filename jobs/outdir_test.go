package jobs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/jobs"
)

// Seed 002's output location: a job may choose its directory under the
// configured root, and nowhere else on disk.
func TestOutputDirUnderRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *jobs.Config) { c.OutputRoot = root })

	j := e.create(t, jobs.Spec{Model: "chat", OutputDir: "team-a/nightly"}, 5)
	p, _ := e.wait(t, j.ID)
	if p.Counts.Succeeded != 5 {
		t.Fatalf("counts %+v", p.Counts)
	}
	dir := filepath.Join(root, "team-a", "nightly", j.ID)
	if got := e.m.Dir(j); got != dir {
		t.Fatalf("Dir = %s, want %s", got, dir)
	}
	if n := len(readLines(t, filepath.Join(dir, jobs.ResultsFile))); n != 5 {
		t.Fatalf("%d result lines in %s, want 5", n, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, jobs.SummaryFile)); err != nil {
		t.Fatalf("no summary in the chosen directory: %v", err)
	}
	if _, err := os.Stat(jobs.JobDir(e.dir, j.ID)); !os.IsNotExist(err) {
		t.Fatalf("files under the data directory too: %v", err)
	}
	if err := e.m.Delete(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Delete left %s: %v", dir, err)
	}

	for _, dir := range []string{"../up", "/abs", "a/../../up", "escape/x"} {
		_, err := e.m.Begin(t.Context(), jobs.Spec{Model: "chat", OutputDir: dir})
		if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), "spec.output_dir") {
			t.Errorf("output_dir %q: %v, want ErrInvalid naming spec.output_dir", dir, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("something was written through the symbolic link: %v", ents)
	}
}

func TestOutputDirNeedsARoot(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.m.Begin(t.Context(), jobs.Spec{Model: "chat", OutputDir: "x"})
	if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), "no output root") {
		t.Fatalf("Begin = %v, want ErrInvalid saying the server has no output root", err)
	}
}

// Custom ids are unique in a job, as in OpenAI's Batch API: a duplicate
// fails the creation naming both lines, whichever way the lines came.
func TestDuplicateCustomID(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	line := func(id string) []byte {
		return []byte(`{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"hi"}]}}`)
	}
	for name, add := range map[string]func(c *jobs.Creator) error{
		"Add": func(c *jobs.Creator) error {
			for _, id := range []string{"a", "b", "a"} {
				if err := c.Add(ctx, id, chatItem("hi")); err != nil {
					return err
				}
			}
			return nil
		},
		"AddLine": func(c *jobs.Creator) error {
			for _, id := range []string{"a", "b", "a"} {
				if err := c.AddLine(ctx, line(id)); err != nil {
					return err
				}
			}
			return nil
		},
		"an invalid line first": func(c *jobs.Creator) error {
			if err := c.AddLine(ctx, []byte(`{"custom_id":"a","method":"GET"}`)); err != nil {
				return err
			}
			if err := c.AddInvalid(ctx, "b", "bad url"); err != nil {
				return err
			}
			return c.AddLine(ctx, line("a"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Abort()
			err = add(c)
			if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), `line 3: custom_id "a" is already used by line 1`) {
				t.Fatalf("%v, want ErrInvalid naming lines 3 and 1", err)
			}
		})
	}
	// Ids the creator makes up for items that have none do not count.
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Add(ctx, "", chatItem("hi")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Finish(ctx); err != nil {
		t.Fatal(err)
	}
}

// A custom id is bounded on every way in: a CreateJob item's (Add) fails
// the creation naming the limit, as a batch file's line (AddLine) is an
// error line naming it.
func TestCustomIDBounded(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	long := strings.Repeat("x", jobs.MaxCustomIDBytes+1)
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	if err := c.Add(ctx, strings.Repeat("x", jobs.MaxCustomIDBytes), chatItem("hi")); err != nil {
		t.Fatalf("an id of %d bytes: %v", jobs.MaxCustomIDBytes, err)
	}
	err = c.Add(ctx, long, chatItem("hi"))
	if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), "custom_id") || !strings.Contains(err.Error(), "at most 512 bytes, got 513") {
		t.Fatalf("an id of %d bytes: %v, want ErrInvalid naming custom_id and the limit", len(long), err)
	}
	if _, _, err := jobs.ParseOpenAILine([]byte(`{"custom_id":"` + long + `","method":"POST","url":"/v1/chat/completions","body":{}}`)); err == nil || !strings.Contains(err.Error(), "custom_id: must be at most 512 bytes, got ") {
		t.Fatalf("a line's id of %d bytes: %v, want an error naming custom_id and the limit", len(long), err)
	}
}

// A gRPC caller's request (NextIsRequest) is named in errors by its index
// among the requests and its "id", not by a batch file's line number and
// custom_id, also beside lines in one job.
func TestRequestNamedByIndex(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	c, err := e.m.Begin(ctx, jobs.Spec{Model: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	c.NextIsRequest()
	if err := c.Add(ctx, "a", chatItem("hi")); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(ctx, "b", chatItem("hi")); err != nil { // a line: not a request
		t.Fatal(err)
	}
	c.NextIsRequest()
	err = c.Add(ctx, "a", chatItem("hi"))
	if want := `requests[1]: id "a" is already used by requests[0]`; !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want ErrInvalid saying %s", err, want)
	}
	err = c.Add(ctx, "b", chatItem("hi"))
	if want := `line 4: custom_id "b" is already used by line 2`; !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want ErrInvalid saying %s", err, want)
	}
	c.NextIsRequest()
	err = c.Add(ctx, strings.Repeat("x", jobs.MaxCustomIDBytes+1), chatItem("hi"))
	if want := `requests[2]: id "xxx`; !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "line") {
		t.Fatalf("%v, want ErrInvalid saying %s", err, want)
	}
}
