// Package version describes the running binary from the build information
// the Go toolchain embeds (debug.ReadBuildInfo): the module's version and
// the VCS revision it was built from, for each command's --version.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// String is name's version line: "batcherd v1.2.3 (module
// github.com/batcherhq/batcher, revision 0123abc... 2026-01-02T03:04:05Z,
// modified, go1.26.0)". A binary built without module or VCS information
// (go run, go test, -buildvcs=false) says what it lacks.
func String(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	return Format(name, bi)
}

// Format is String for the build information bi.
func Format(name string, bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var parts []string
	if bi.Main.Path != "" {
		parts = append(parts, "module "+bi.Main.Path)
	}
	if rev := settings["vcs.revision"]; rev != "" {
		r := "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			r += " " + t
		}
		parts = append(parts, r)
		if settings["vcs.modified"] == "true" {
			parts = append(parts, "modified")
		}
	} else {
		parts = append(parts, "no VCS revision")
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	return fmt.Sprintf("%s %s (%s)", name, v, strings.Join(parts, ", "))
}
