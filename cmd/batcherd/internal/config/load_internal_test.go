package config

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// Every default --help shows is the value the setting has when nothing
// overrides it: set to what the help shows, each setting leaves Default()
// unchanged. "none" stands for an empty value.
func TestHelpDefaultsAreTheDefaults(t *testing.T) {
	def := Default()
	for _, s := range settings {
		shown := defaultString(def, s.path)
		v := shown
		if v == "none" {
			if got := settingString(def, s.path); got != "" {
				t.Errorf("--%s: help says none, the default is %q", s.flag, got)
			}
			continue
		}
		c := Default()
		if err := s.set(c, v); err != nil {
			t.Errorf("--%s %s (the help's default): %v", s.flag, v, err)
			continue
		}
		if !reflect.DeepEqual(c, def) {
			t.Errorf("--%s %s (the help's default) changes the default configuration", s.flag, v)
		}
	}
}

// The defaults the help once showed as none, from the constants the code
// runs with.
func TestHelpShowsRealDefaults(t *testing.T) {
	var usage bytes.Buffer
	if _, err := Load([]string{"-h"}, func(string) (string, bool) { return "", false }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load -h: %v", err)
	}
	help := usage.String()
	for flagName, want := range map[string]string{
		"admin-listen":   DefaultAdminListen,
		"stats-interval": DefaultStatsInterval.String(),
		"max-lanes":      strconv.Itoa(batcher.DefaultMaxLanes),
		"jobs-max-items": strconv.Itoa(jobs.DefaultMaxItems),
		"jobs-ttl":       jobs.DefaultTTL.String(),
		"pprof":          "false",
		"access-log":     DefaultAccessLog,
		"http-listen":    DefaultHTTPListen,
		"job-store":      JobStoreSQLite,
	} {
		_, rest, ok := strings.Cut(help, "  -"+flagName+" ")
		if !ok {
			_, rest, ok = strings.Cut(help, "  -"+flagName+"\n")
		}
		line, _, _ := strings.Cut(strings.TrimLeft(rest, " \n\tvalue"), "\n")
		if !ok || !strings.HasSuffix(line, "default "+want+")") {
			t.Errorf("--%s help: %q, want it to end with default %s", flagName, line, want)
		}
	}
}

// One word, off, turns each optional listener off.
func TestListenOff(t *testing.T) {
	env := func(string) (string, bool) { return "", false }
	c, err := Load([]string{"--admin-listen", "off", "--http-listen", "off"}, env, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("--admin-listen off --http-listen off: %v", err)
	}
	if !c.Telemetry.AdminOff() || c.HTTP.Listen != ListenOff {
		t.Errorf("admin off %v, http %q: want both off", c.Telemetry.AdminOff(), c.HTTP.Listen)
	}
	if c, err := Parse([]byte("telemetry: {admin_listen: off}\nhttp: {listen: off}\n")); err != nil || !c.Telemetry.AdminOff() {
		t.Errorf("admin_listen: off in YAML: %v, off %v", err, c != nil && c.Telemetry.AdminOff())
	}
	if c, err := Load([]string{"--admin-listen", ""}, env, &bytes.Buffer{}); err != nil || !c.Telemetry.AdminOff() {
		t.Errorf("--admin-listen '' (empty, as before): %v", err)
	}
}
