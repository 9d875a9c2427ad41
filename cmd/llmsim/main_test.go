package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
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
