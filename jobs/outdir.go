package jobs

import (
	"fmt"
	"os"
	"path/filepath"
)

// MaxOutputDirBytes bounds Spec.OutputDir.
const MaxOutputDirBytes = 512

// outputBase returns where a job's files go: a base directory and a
// relative directory under it, which openOutput opens through an os.Root.
// A spec's OutputDir puts them in <OutputRoot>/<OutputDir>/<id>, otherwise
// they go in <DataDir>/jobs/<id>. The job's id keeps two jobs that chose
// the same directory apart.
func (m *Manager) outputBase(j *Job) (base, dir string) {
	if j.Spec.OutputDir != "" {
		return m.cfg.OutputRoot, filepath.Join(filepath.FromSlash(j.Spec.OutputDir), j.ID)
	}
	return m.cfg.DataDir, jobsSubdir(j.ID)
}

// Dir returns the directory of a job's output files.
func (m *Manager) Dir(j *Job) string {
	base, dir := m.outputBase(j)
	return filepath.Join(base, dir)
}

// RelDir returns the directory of a job's output files relative to its
// base: the data directory, or the output root when the spec chose one.
// It uses forward slashes, as the wire does.
func (m *Manager) RelDir(j *Job) string {
	_, dir := m.outputBase(j)
	return filepath.ToSlash(dir)
}

// validateOutputDir checks a spec's OutputDir: a local relative path
// (filepath.IsLocal: no "..", not absolute) under a configured root.
// Whether it leaves the root through a symbolic link is checked when the
// directory is made, through an os.Root (checkOutputDir).
func (m *Manager) validateOutputDir(dir string) error {
	if dir == "" {
		return nil
	}
	bad := func(format string, args ...any) error {
		return kindErr(ErrInvalid, "spec.output_dir: %s", fmt.Sprintf(format, args...))
	}
	switch {
	case m.cfg.OutputRoot == "":
		return bad("this server has no output root (jobs.output_root): its jobs write under the data directory only")
	case len(dir) > MaxOutputDirBytes:
		return bad("at most %d bytes, got %d", MaxOutputDirBytes, len(dir))
	case !filepath.IsLocal(filepath.FromSlash(dir)):
		return bad("must be a relative path under the output root, without \"..\", got %q", cut(dir))
	}
	return nil
}

// checkOutputDir makes a new job's output directory under the output root
// through an os.Root, which refuses a path that leaves the root by a
// symbolic link: the caller learns of a bad directory at creation, not when
// the job runs.
func (m *Manager) checkOutputDir(j *Job) error {
	if j.Spec.OutputDir == "" {
		return nil
	}
	base, dir := m.outputBase(j)
	root, err := os.OpenRoot(base)
	if err != nil {
		return fmt.Errorf("jobs: output root: %w", err)
	}
	defer func() { _ = root.Close() }()
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return kindErr(ErrInvalid, "spec.output_dir: cannot make %q under the output root: %w", cut(j.Spec.OutputDir), err)
	}
	return nil
}

// removeOutput removes a job's output directory, through the os.Root of its
// base.
func (m *Manager) removeOutput(j *Job) error {
	base, dir := m.outputBase(j)
	root, err := os.OpenRoot(base)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer func() { _ = root.Close() }()
	return root.RemoveAll(dir)
}
