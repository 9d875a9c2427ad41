package main

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/security"
)

// Against a batcherd with tenants, a token from the flag, the environment
// or a file authenticates; none is UNAUTHENTICATED.
func TestToken(t *testing.T) {
	const tok = "s3cret-token-for-team-a"
	tenants := writeFile(t, "tenants.yaml", fmt.Sprintf("tenants:\n  - name: team-a\n    tokens: [%s]\n", security.HashToken(tok)))
	addr := startBatcherd(t, fastConfig, "--tenants", tenants) // health needs no token
	tokFile := writeFile(t, "token", "\n"+tok+"\n")
	empty := writeFile(t, "empty", " \n")

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		// The service says only "unauthenticated"; batcherctl adds what it sent.
		{"none", nil, nil, exitFailed, "submit: UNAUTHENTICATED: unauthenticated (no token was sent, and the service wants one: give --token-file, --token, $BATCHERCTL_TOKEN or $BATCHERCTL_TOKEN_FILE)"},
		{"wrong", nil, []string{"--token", "nope"}, exitFailed, "submit: UNAUTHENTICATED: unauthenticated (the service refused the token sent: check that it is a current token of a tenant)"},
		{"wrong in env", []string{tokenEnv + "=nope"}, nil, exitFailed, "the service refused the token sent"},
		{"flag", nil, []string{"--token", tok}, 0, "Hi"},
		{"file", nil, []string{"--token-file", tokFile}, 0, "Hi"},
		{"env", []string{tokenEnv + "=" + tok}, nil, 0, "Hi"},
		{"env file", []string{tokenFileEnv + "=" + tokFile}, nil, 0, "Hi"},
		{"flag over env", []string{tokenEnv + "=nope"}, []string{"--token", tok}, 0, "Hi"},
		{"empty file", nil, []string{"--token-file", empty}, exitFailed, "holds no token"},
		{"missing file", nil, []string{"--token-file", "/nonexistent/token"}, exitFailed, "--token-file: open /nonexistent/token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctlEnv(t, addr, tc.env, append(tc.args, "submit", "-m", "sim-chat", "Hi")...)
			out := r.stdout
			if tc.code != 0 {
				out = r.stderr
			}
			if r.code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("%+v; want exit %d with %q", r, tc.code, tc.want)
			}
		})
	}
}

// ctlEnv is ctl with more environment variables.
func ctlEnv(t *testing.T, addr string, env []string, args ...string) ctlResult {
	t.Helper()
	_, bin := binaries(t)
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"--addr", addr}, args...)...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := ctlResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// A run whose stream the service refuses says so as submit does, with the
// code and the service's reason, not as a stream that broke mid-request.
func TestRunUnauthenticated(t *testing.T) {
	tenants := writeFile(t, "tenants.yaml", fmt.Sprintf("tenants:\n  - name: team-a\n    tokens: [%s]\n", security.HashToken("s3cret-token-for-team-a")))
	addr := startBatcherd(t, fastConfig, "--tenants", tenants)
	in := writeFile(t, "in.jsonl", `{"model":"sim-chat","chat":{"messages":[{"role":"user","content":"Hi"}]}}`+"\n")
	r := ctlEnv(t, addr, nil, "run", in, "--out", "-")
	if r.code != exitFailed || !strings.Contains(r.stderr, "run: UNAUTHENTICATED: unauthenticated") || !strings.Contains(r.stderr, "no token was sent") ||
		strings.Contains(r.stderr, "stream ended before") || strings.Contains(r.stderr, "rpc error") {
		t.Errorf("%+v; want exit 1 with \"run: UNAUTHENTICATED: unauthenticated\"", r)
	}
}
