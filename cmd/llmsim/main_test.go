package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/llmsim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-addr", "127.0.0.1:0", "-rpm", "60", "-models", "a, b"}, io.Discard, func(a string) { addrc <- a })
	}()
	addr := <-addrc
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+addr+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"b","input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("x-ratelimit-limit-requests") != "60" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-error-rate", "2"},
		{"-rpm", "-1"},
		{"-batch-time", "-1s"},
		{"-batch-fail-rate", "0.7", "-batch-expire-rate", "0.7"},
		{"-stream-cut-rate", "0.6", "-stream-stall-rate", "0.6"},
		{"-schema-violation-rate", "1.5"},
		{"-batch-max-requests", "-1"},
		{"-models", "a,,b"},
		{"-api-key-env", "LLMSIM_TEST_SURELY_UNSET"},
		{"-shutdown-timeout", "0s"},
		{"-log-level", "loud"},
		{"extra"},
	} {
		err := run(context.Background(), args, io.Discard, nil)
		if err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}

func TestBatchFlags(t *testing.T) {
	o, err := parseFlags([]string{"-batch-time", "30s", "-batch-fail-rate", "0.01", "-batch-expire-rate", "0.02"}, io.Discard)
	if err != nil || o.cfg.BatchTime != 30*time.Second || o.cfg.BatchFailRate != 0.01 || o.cfg.BatchExpireRate != 0.02 {
		t.Fatalf("%+v (%v)", o.cfg, err)
	}
}

func TestAPIKeyFromEnv(t *testing.T) {
	t.Setenv("LLMSIM_TEST_KEY", "sk-local")
	o, err := parseFlags([]string{"-api-key-env", "LLMSIM_TEST_KEY"}, io.Discard)
	if err != nil || o.cfg.APIKey != "sk-local" {
		t.Fatalf("%+v %v", o, err)
	}
}

// TestHelp: -h says what llmsim is for and gives examples, then the flags.
func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"-h"}, &out)
	help := out.String()
	if !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(help, "Usage: llmsim [flags]\n\nllmsim serves a simulated model") ||
		!strings.Contains(help, "Examples:\n  # ") || !strings.Contains(help, "-latency duration") {
		t.Errorf("-h: %v\n%s", err, help)
	}
}

// TestEveryKnobIsAFlag: each field of llmsim.Config that is not a hook (a
// Go function) has its flag, named in kebab case, so that what the package
// can simulate can be tried from the command line. The stream faults, the
// tool-call and schema faults and the batch limits once had none, while
// docs/chat.md and this command's doc named them.
func TestEveryKnobIsAFlag(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	help := out.String()
	named := map[string]string{"APIKey": "api-key-env"}
	ct := reflect.TypeFor[llmsim.Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		if f.Type.Kind() == reflect.Func || f.Type == reflect.TypeFor[*slog.Logger]() {
			continue
		}
		name, ok := named[f.Name]
		if !ok {
			name = kebab(f.Name)
		}
		if !strings.Contains(help, "\n  -"+name+" ") {
			t.Errorf("Config.%s has no flag -%s", f.Name, name)
		}
	}
}

// kebab turns a Go name into a flag's: MaxRequestBytes max-request-bytes,
// RPM rpm.
func kebab(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// TestStreamCutFlag: -stream-cut-rate 1 cuts every streamed answer after
// its first chunk, without [DONE].
func TestStreamCutFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = run(ctx, []string{"-addr", "127.0.0.1:0", "-stream-cut-rate", "1"}, io.Discard, func(a string) { addrc <- a })
	}()
	client := &http.Client{Transport: &http.Transport{}}
	// stop ends the server and waits for run to return, on every way out
	// of the test, a failure's included: goleak sees no server left.
	stop := func() error {
		client.CloseIdleConnections()
		cancel()
		<-done
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	var addr string
	select {
	case addr = <-addrc:
	case <-done:
		t.Fatalf("run: %v", runErr)
	}
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim-chat","stream":true,"messages":[{"role":"user","content":"Tell me a story"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "data: {") || strings.Contains(string(b), "[DONE]") {
		t.Errorf("-stream-cut-rate 1: %d\n%s\nwant chunks cut short of [DONE]", resp.StatusCode, b)
	}
}
