package jobs

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// TestReason: an error of one of the package's kinds reads as before
// ("jobs: invalid: ..."), matches its kind and its cause with errors.Is,
// and gives a door its reason alone; any other error gives Message.
func TestReason(t *testing.T) {
	for _, tt := range []struct {
		err        error
		kind       error
		text, want string
	}{
		{kindErr(ErrInvalid, "%s: %s", "spec.name", "at most 256 bytes"), ErrInvalid,
			"jobs: invalid: spec.name: at most 256 bytes", "spec.name: at most 256 bytes"},
		{kindErr(ErrTooManyItems, "more than %d items (the server's limit)", 3), ErrTooManyItems,
			"jobs: too many items: more than 3 items (the server's limit)", "more than 3 items (the server's limit)"},
		{fmt.Errorf("%w: %q", ErrNotFound, "job_1"), ErrNotFound, `jobs: job not found: "job_1"`, `job not found: "job_1"`},
	} {
		if got := tt.err.Error(); got != tt.text {
			t.Errorf("Error() = %q, want %q", got, tt.text)
		}
		if !errors.Is(tt.err, tt.kind) {
			t.Errorf("%q is not %v", tt.err, tt.kind)
		}
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
	err := kindErr(ErrInvalid, "spec.output_dir: cannot make %q: %w", "x", fs.ErrPermission)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("%q: want both ErrInvalid and its cause", err)
	}
	if got, want := Reason(err), `spec.output_dir: cannot make "x": permission denied`; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
}
