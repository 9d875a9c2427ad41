package version_test

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/internal/version"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/batcherhq/batcher", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "false"}}},
			"batcherd v1.2.3 (module github.com/batcherhq/batcher, revision 0123abcd 2026-01-02T03:04:05Z, go1.26.0)"},
		{"dirty tree", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/batcherhq/batcher", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}},
			"batcherd (devel) (module github.com/batcherhq/batcher, revision 0123abcd, modified, go1.26.0)"},
		{"no vcs", debug.BuildInfo{Main: debug.Module{Path: "github.com/batcherhq/batcher"}},
			"batcherd (devel) (module github.com/batcherhq/batcher, no VCS revision)"},
	} {
		if got := version.Format("batcherd", &tc.bi); got != tc.want {
			t.Errorf("%s: Format = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// In a test binary the main module is this one.
func TestString(t *testing.T) {
	if got := version.String("x"); !strings.HasPrefix(got, "x ") || !strings.Contains(got, "github.com/batcherhq/batcher") {
		t.Errorf("String = %q, want the name and the module path", got)
	}
}
