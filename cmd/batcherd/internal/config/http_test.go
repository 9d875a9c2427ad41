package config_test

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

func TestHTTPDefaultsAndSettings(t *testing.T) {
	c, err := config.Load(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Listen != config.DefaultHTTPListen || c.Jobs.DataDir != "" || c.FilesDir() != "" {
		t.Errorf("defaults: http %+v data_dir %q", c.HTTP, c.Jobs.DataDir)
	}
	for _, src := range []struct {
		args []string
		env  func(string) (string, bool)
	}{
		{[]string{"--http-listen=127.0.0.1:9", "--data-dir=/var/lib/batcher"}, env()},
		{nil, env("BATCHER_HTTP_LISTEN", "127.0.0.1:9", "BATCHER_DATA_DIR", "/var/lib/batcher")},
		{[]string{"--config", writeFile(t, "http: {listen: \"127.0.0.1:9\"}\ndata_dir: /var/lib/batcher\n")}, env()},
	} {
		c, err := config.Load(src.args, src.env, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.HTTP.Listen != "127.0.0.1:9" || c.FilesDir() != filepath.Join("/var/lib/batcher", "files") {
			t.Errorf("%v: http.listen %q, files dir %q", src.args, c.HTTP.Listen, c.FilesDir())
		}
	}
	var sb strings.Builder
	if _, err := config.Load([]string{"-h"}, env(), &sb); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	for _, want := range []string{"-http-listen", "BATCHER_HTTP_LISTEN", "default 127.0.0.1:8081", "-data-dir", "BATCHER_DATA_DIR"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

func TestHTTPValidate(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string // "" for valid
	}{
		{"http: {listen: \"off\"}", ""},
		{"http: {listen: \"localhost:0\"}", ""},
		{"http: {listen: \"[::1]:8081\"}", ""},
		{"http: {listen: \"0.0.0.0:8081\", tokens_file: /run/secrets/tokens}", "http.listen: 0.0.0.0:8081 is not a loopback address and the listener has no TLS"},
		{"{security: {insecure: true}, http: {listen: \"0.0.0.0:8081\", tokens_file: /run/secrets/tokens}}", ""},
		{"{security: {tenants_file: /t.yaml}, http: {tokens_file: /run/secrets/tokens}}", "cannot be used with security.tenants_file"},
		{"http: {listen: \"0.0.0.0:8081\"}", `http.listen: 0.0.0.0:8081 is not a loopback address and the listener has no TLS`},
		{"http: {listen: \":8081\"}", `http.listen: :8081 is not a loopback address`},
		// Every listener follows the same --insecure rule, tokens or not.
		{"{security: {insecure: true}, http: {listen: \"0.0.0.0:8081\"}}", ""},
		{"http: {listen: \"example.com:8081\"}", "is not a loopback address"},
		{"http: {listen: \"nowhere\"}", `http.listen: must be host:port or "off"`},
		{"http: {listen: \"127.0.0.1:70000\"}", "http.listen: port must be 0 to 65535"},
		{"http: {tokens_env: \"NOT-A-NAME\"}", "http.tokens_env: must be an environment variable name"},
		{"http: {max_body_bytes: -1}", "http.max_body_bytes: must not be negative"},
		{"http: {max_json_depth: 1}", "http.max_json_depth: must be at least 2"},
		{"http: {default_timeout: 25h}", "http.default_timeout: must be 0 to 24h0m0s"},
		{"http: {tokens: [a]}", "field tokens not found"},
	} {
		_, err := config.Parse([]byte(tc.yaml))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestHTTPTokens(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte("# callers\ntok-c\n\n  tok-d  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# none yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := "security: {insecure: true}\nhttp: {listen: \"0.0.0.0:0\", tokens_env: TOKS, tokens_file: " + file + "}\n"
	c, err := config.Load([]string{"--config", writeFile(t, yaml)}, env("TOKS", "tok-a, tok-b,"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	front, err := c.BuildHTTP(env("TOKS", "tok-a, tok-b,"), nil)
	if err != nil || front == nil || !front.Authenticated || front.Listen != "0.0.0.0:0" {
		t.Fatalf("BuildHTTP: %+v, %v", front, err)
	}
	// The tokens themselves are the handler's; the error texts below must
	// never quote them.
	for _, tc := range []struct {
		yaml string
		env  func(string) (string, bool)
		want string
	}{
		{"http: {tokens_env: TOKS}", env(), "http.tokens_env: environment variable TOKS is empty or unset"},
		{"http: {tokens_env: TOKS}", env("TOKS", " , "), "http.tokens_env: environment variable TOKS is empty or unset"},
		{"http: {tokens_file: " + empty + "}", env(), "http.tokens_file: " + empty + " holds no token"},
		{"http: {tokens_file: " + filepath.Join(dir, "absent") + "}", env(), "http.tokens_file: open"},
	} {
		c, err := config.Load([]string{"--config", writeFile(t, tc.yaml)}, tc.env, io.Discard)
		if err == nil {
			_, err = c.BuildHTTP(tc.env, nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	c, err = config.Parse([]byte("http: {listen: \"off\"}"))
	if err != nil {
		t.Fatal(err)
	}
	if front, err := c.BuildHTTP(env(), nil); front != nil || err != nil {
		t.Errorf("off: %+v, %v; want nil", front, err)
	}
}
