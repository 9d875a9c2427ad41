package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/internal/race"
)

// The tests build batcherd and batcherctl once into binDir and run them as
// a user would: batcherd on a free port, batcherctl against it.
var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "batcherctl-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// testTimeout bounds each test's waits, so that a bug fails the test
// instead of hanging it.
const testTimeout = 3 * time.Minute

// binaries builds batcherd and batcherctl (with -race when the tests run
// with it), once, and returns their paths.
func binaries(t testing.TB) (batcherd, batcherctl string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go tool to build the binaries: %w", err)
			return
		}
		ctlArgs := []string{"build", "-o", filepath.Join(binDir, "batcherctl")}
		if race.Enabled {
			ctlArgs = append(ctlArgs, "-race")
		}
		for _, args := range [][]string{
			{"build", "-o", filepath.Join(binDir, "batcherd"), "../batcherd"},
			append(ctlArgs, "."),
		} {
			if out, err := exec.Command(goBin, args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "batcherd"), filepath.Join(binDir, "batcherctl")
}

// cleanEnv is the environment without the caller's BATCHER*_ and OTEL_
// variables, so that a developer's settings do not leak into a test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATCHER") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// fastConfig: the simulated provider answering in about a millisecond.
const fastConfig = `
queue_capacity: 100000
stream_window: 64
backends:
  - name: sim
    type: sim
    max_concurrency: 8
    sim: {base_latency: 1ms, per_token: 0s}
routes:
  - name: sim-chat
    operation: chat
    backend: sim
    batching: {max_batch_size: 16, window: 2ms}
  - name: sim-embed
    operation: embedding
    backend: sim
`

// slowConfig: a few hundred requests take seconds, and a small stream
// window keeps few in flight.
const slowConfig = `
stream_window: 16
backends:
  - name: sim
    type: sim
    max_concurrency: 2
    sim: {base_latency: 50ms, per_token: 0s}
routes:
  - name: sim-chat
    operation: chat
    backend: sim
    batching: {max_batch_size: 8, window: 5ms}
`

// startBatcherd starts batcherd with config on a free port, waits until it
// listens and answers health checks, and returns its address. It stops
// when the test ends. args are more flags.
func startBatcherd(t testing.TB, config string, args ...string) string {
	t.Helper()
	batcherd, _ := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "batcherd.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(batcherd, append([]string{"--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	addrs := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addrs <- rec.Addr
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if err := <-exited; err != nil && !strings.Contains(err.Error(), "killed") {
			t.Logf("batcherd: %v", err)
		}
	})
	var addr string
	select {
	case addr = <-addrs:
	case err := <-exited:
		exited <- err
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("batcherd exited before listening: %v\n%s", err, logs.String())
	case <-time.After(testTimeout):
		t.Fatal("batcherd did not listen in time")
	}
	if r := ctl(t, addr, "", "health"); r.code != 0 || r.stdout != "SERVING\n" {
		t.Fatalf("batcherd is not healthy: %+v", r)
	}
	return addr
}

type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctl runs batcherctl --addr addr args with stdin and waits for it.
func ctl(t testing.TB, addr, stdin string, args ...string) ctlResult {
	t.Helper()
	_, bin := binaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--addr", addr}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := ctlResult{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("batcherctl %v: %v", args, err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// writeFile writes content into a new file of the test's temp dir.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
