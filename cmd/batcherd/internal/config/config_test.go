package config_test

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/llmsim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "batcherd.yaml")
	if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// newCore checks that a config the package accepts, the core accepts too.
func newCore(t testing.TB, c *config.Config) *batcher.Batcher {
	t.Helper()
	b, err := c.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	core, err := batcher.New(b.Core...)
	if err != nil {
		t.Fatalf("batcher.New rejected a valid config: %v", err)
	}
	return core
}

func TestDefaults(t *testing.T) {
	c, err := config.Load(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, config.Default()) {
		t.Errorf("Load with nothing set = %+v, want the defaults", c)
	}
	if c.Listen != config.DefaultListen || c.DrainTimeout.D() != 30*time.Second || c.Log.Format != "json" {
		t.Errorf("defaults %+v", c)
	}
	core := newCore(t, c)
	got := map[string]batcher.Operation{}
	for _, r := range core.Routes() {
		got[r.Name] = r.Op
		if r.Backend != "sim" {
			t.Errorf("route %s on backend %q, want sim", r.Name, r.Backend)
		}
	}
	want := map[string]batcher.Operation{"sim-chat": batcher.OpChat, "sim-completion": batcher.OpCompletion, "sim-embed": batcher.OpEmbedding}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("default routes %v, want %v", got, want)
	}
	b, _ := c.Build()
	sc := b.Sims["sim"].Config()
	if sc.BaseLatency != config.DefaultSimBaseLatency || sc.PerToken != config.DefaultSimPerToken || sc.FanOut {
		t.Errorf("default sim %+v", sc)
	}
}

const fullFile = `
listen: 0.0.0.0:7000
security: {insecure: true}
log: {level: debug, format: text}
queue_capacity: 50
queue_timeout: 10s
drain_timeout: 5s
aging_step: 500ms
idle_lane_timeout: 2m
max_lanes: 100
stream_window: 64
summary_interval: 250ms
backends:
  - name: fast
    type: sim
    max_concurrency: 4
    min_concurrency: 2
    rpm: 500
    tpm: 90000
    protected_share: 0.3
    attempt_timeout: 30s
    retry: {max_retries: 5, initial_backoff: 100ms, factor: 3, max_backoff: 5s, budget_ratio: 0.5, budget_window: 20s, budget_min: 3}
    breaker: {consecutive: 7, ratio: 0.6, window: 30s, min_calls: 12, cooldown: 3s, probes: 2}
    sim:
      base_latency: 200ms
      per_token: 0s
      max_concurrency: 8
      rpm: 600
      tpm: 100000
      rpm_burst: 20
      max_batch_size: 20
      native: false
      failure_rate: 0.2
      partial_failure_rate: 0.01
      seed: 42
      dimensions: 16
      models:
        big-embed: {dimensions: 64}
routes:
  - name: chat
    operation: chat
    backend: fast
    model: gpt-sim
    fallbacks:
      - {backend: spare, model: other}
    batching: {max_batch_size: 20, min_batch_size: 4, max_batch_tokens: 8000, window: 50ms, max_wait: 2s}
    max_input_bytes: 4096
    max_tokens_limit: 1024
    default_max_tokens: 64
  - name: embed
    operation: embedding
    backend: fast
`

const spareBackend = `
  - name: spare
    type: sim
`

func TestFile(t *testing.T) {
	c, err := config.Parse([]byte(fullFileWithSpare()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:7000" || c.Log != (config.Log{Level: "debug", Format: "text"}) || c.QueueCapacity != 50 ||
		c.QueueTimeout.D() != 10*time.Second || c.DrainTimeout.D() != 5*time.Second || c.AgingStep.D() != 500*time.Millisecond ||
		c.IdleLaneTimeout.D() != 2*time.Minute || c.MaxLanes != 100 || c.StreamWindow != 64 || c.SummaryInterval.D() != 250*time.Millisecond {
		t.Errorf("scalars %+v", c)
	}
	if len(c.Backends) != 2 || len(c.Routes) != 2 {
		t.Fatalf("the file's lists must replace the defaults: %d backends, %d routes", len(c.Backends), len(c.Routes))
	}
	be := c.Backends[0]
	if be.MaxConcurrency != 4 || be.MinConcurrency != 2 || be.RPM != 500 || be.TPM != 90000 || be.ProtectedShare != 0.3 ||
		be.AttemptTimeout.D() != 30*time.Second ||
		be.Retry != (config.Retry{MaxRetries: 5, InitialBackoff: config.Duration(100 * time.Millisecond), Factor: 3,
			MaxBackoff: config.Duration(5 * time.Second), BudgetRatio: 0.5, BudgetWindow: config.Duration(20 * time.Second), BudgetMin: 3}) ||
		be.Breaker != (config.Breaker{Consecutive: 7, Ratio: 0.6, Window: config.Duration(30 * time.Second), MinCalls: 12,
			Cooldown: config.Duration(3 * time.Second), Probes: 2}) {
		t.Errorf("backend %+v", be)
	}
	r := c.Routes[0]
	if len(r.Fallbacks) != 1 || r.Fallbacks[0] != (config.Target{Backend: "spare", Model: "other"}) {
		t.Errorf("fallbacks %+v", r.Fallbacks)
	}
	if r.Model != "gpt-sim" || r.Batching.MaxBatchSize != 20 || r.Batching.MinBatchSize != 4 || r.Batching.MaxBatchTokens != 8000 ||
		r.Batching.Window.D() != 50*time.Millisecond || r.Batching.MaxWait.D() != 2*time.Second ||
		r.MaxInputBytes != 4096 || r.MaxTokensLimit != 1024 || r.DefaultMaxTokens != 64 {
		t.Errorf("route %+v", r)
	}
	b, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	sc := b.Sims["fast"].Config()
	if sc.BaseLatency != 200*time.Millisecond || sc.PerToken != 0 || sc.MaxConcurrency != 8 || sc.RPM != 600 || sc.TPM != 100000 ||
		sc.RPMBurst != 20 || sc.MaxBatchSize != 20 || !sc.FanOut || sc.FailureRate != 0.2 || sc.PartialFailureRate != 0.01 ||
		sc.Seed != 42 || sc.Dimensions != 16 || sc.Models["big-embed"].Dimensions != 64 {
		t.Errorf("sim config %+v", sc)
	}
	newCore(t, c)
}

// fullFileWithSpare is fullFile with a second backend for the fallback.
func fullFileWithSpare() string {
	return strings.Replace(fullFile, "routes:\n", strings.TrimPrefix(spareBackend, "\n")+"routes:\n", 1)
}

func TestEmptyFileIsDefaults(t *testing.T) {
	for _, body := range []string{"", "# nothing\n", "---\n"} {
		c, err := config.Parse([]byte(body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if !reflect.DeepEqual(c, config.Default()) {
			t.Errorf("%q: %+v, want the defaults", body, c)
		}
	}
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, "listen: 127.0.0.1:1001\nqueue_timeout: 11s\nstream_window: 11\nlog: {level: warn}\n")
	other := writeFile(t, "listen: 127.0.0.1:4004\n")
	for _, tc := range []struct {
		name   string
		args   []string
		env    []string
		listen string
		qt     time.Duration
		window int
		level  string
	}{
		{"defaults", nil, nil, config.DefaultListen, batcher.DefaultQueueTimeout, 256, "info"},
		{"file", []string{"--config", file}, nil, "127.0.0.1:1001", 11 * time.Second, 11, "warn"},
		{"file from env", nil, []string{"BATCHER_CONFIG", file}, "127.0.0.1:1001", 11 * time.Second, 11, "warn"},
		{"flag file beats env file", []string{"--config", file}, []string{"BATCHER_CONFIG", other}, "127.0.0.1:1001", 11 * time.Second, 11, "warn"},
		{"env beats file", []string{"--config", file}, []string{"BATCHER_LISTEN", "127.0.0.1:2002", "BATCHER_QUEUE_TIMEOUT", "22s"},
			"127.0.0.1:2002", 22 * time.Second, 11, "warn"},
		{"flag beats env", []string{"--config", file, "--listen=127.0.0.1:3003", "-stream-window", "33", "--log-level", "error"},
			[]string{"BATCHER_LISTEN", "127.0.0.1:2002", "BATCHER_QUEUE_TIMEOUT", "22s", "BATCHER_STREAM_WINDOW", "22"},
			"127.0.0.1:3003", 22 * time.Second, 33, "error"},
		{"last flag wins", []string{"--listen=127.0.0.1:1", "--listen=127.0.0.1:2"}, nil, "127.0.0.1:2", batcher.DefaultQueueTimeout, 256, "info"},
		{"empty BATCHER_CONFIG", nil, []string{"BATCHER_CONFIG", ""}, config.DefaultListen, batcher.DefaultQueueTimeout, 256, "info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(tc.args, env(tc.env...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.Listen != tc.listen || c.QueueTimeout.D() != tc.qt || c.StreamWindow != tc.window || c.Log.Level != tc.level {
				t.Errorf("got listen %s, queue timeout %v, window %d, level %s; want %s, %v, %d, %s",
					c.Listen, c.QueueTimeout, c.StreamWindow, c.Log.Level, tc.listen, tc.qt, tc.window, tc.level)
			}
		})
	}
}

func TestEveryEnvAndFlag(t *testing.T) {
	vals := map[string]string{
		"listen": "127.0.0.1:9", "log-level": "debug", "log-format": "text", "queue-capacity": "7",
		"queue-timeout": "7s", "drain-timeout": "7s", "aging-step": "7s", "idle-lane-timeout": "7s",
		"stream-window": "7", "summary-interval": "7s",
	}
	check := func(t *testing.T, c *config.Config) {
		t.Helper()
		s := 7 * time.Second
		if c.Listen != "127.0.0.1:9" || c.Log.Level != "debug" || c.Log.Format != "text" || c.QueueCapacity != 7 ||
			c.QueueTimeout.D() != s || c.DrainTimeout.D() != s || c.AgingStep.D() != s || c.IdleLaneTimeout.D() != s ||
			c.StreamWindow != 7 || c.SummaryInterval.D() != s {
			t.Errorf("got %+v", c)
		}
	}
	var args, envs []string
	for k, v := range vals {
		args = append(args, "--"+k+"="+v)
		envs = append(envs, "BATCHER_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_")), v)
	}
	c, err := config.Load(args, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check(t, c)
	if c, err = config.Load(nil, env(envs...), io.Discard); err != nil {
		t.Fatal(err)
	}
	check(t, c)
}

func TestHelp(t *testing.T) {
	var sb strings.Builder
	_, err := config.Load([]string{"-h"}, env(), &sb)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"Usage: batcherd [flags]", "gRPC batching gateway", "batcherd.example.yaml", "backends and routes",
		"-listen", "BATCHER_LISTEN", "default 127.0.0.1:50051", "-config", "-drain-timeout", "default 30s"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, sb.String())
		}
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"bad env int", nil, []string{"BATCHER_QUEUE_CAPACITY", "many"}, `queue_capacity (BATCHER_QUEUE_CAPACITY): want an integer, got "many"`},
		{"bad env duration", nil, []string{"BATCHER_DRAIN_TIMEOUT", "30"}, `drain_timeout (BATCHER_DRAIN_TIMEOUT): want a Go duration`},
		{"bad flag duration", []string{"--queue-timeout", "soon"}, nil, `queue_timeout (--queue-timeout): want a Go duration such as 250ms or 1m30s, got "soon"`},
		// A value that parses but is out of range names where it came from.
		{"flag value invalid", []string{"--queue-capacity", "0"}, nil, "queue_capacity (--queue-capacity): must be at least 1, got 0"},
		{"env value invalid", nil, []string{"BATCHER_LOG_FORMAT", "xml"}, `log.format (BATCHER_LOG_FORMAT): must be json or text, got "xml"`},
		{"flag over env", []string{"--drain-timeout", "-1s"}, []string{"BATCHER_DRAIN_TIMEOUT", "5s"}, "drain_timeout (--drain-timeout): must be positive"},
		{"unknown flag", []string{"--lisen", "x"}, nil, "flag provided but not defined: -lisen"},
		{"argument", []string{"serve"}, nil, `unexpected argument "serve"`},
		{"missing file", []string{"--config", "/nonexistent/batcherd.yaml"}, nil, "config file: open /nonexistent/batcherd.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(tc.args, env(tc.env...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("file error names the file", func(t *testing.T) {
		file := writeFile(t, "routes:\n  - name: x\n    opration: chat\n")
		_, err := config.Load([]string{"--config", file}, env(), io.Discard)
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "routes[0].opration (line 3)") {
			t.Errorf("got %v, want the file and the bad key named", err)
		}
	})
	t.Run("file too large", func(t *testing.T) {
		file := writeFile(t, "# "+strings.Repeat("x", config.MaxFileBytes))
		_, err := config.Load([]string{"--config", file}, env(), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
			t.Errorf("got %v", err)
		}
	})
}

func TestParseErrors(t *testing.T) {
	const route = "routes:\n  - name: r\n    operation: chat\n    backend: sim\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		// Decoding.
		{"unknown top key", "listn: x\n", "listn (line 1): field listn not found"},
		{"unknown key in flow style", "routes:\n  - {name: r, opration: chat}\n", "routes[0] (line 2): field opration not found"},
		{"unknown nested key", "routes:\n  - name: r\n    batching:\n      windw: 1s\n", "routes[0].batching.windw (line 4): field windw not found"},
		{"unknown sim key", "backends:\n  - name: s\n    type: sim\n    sim:\n      latency: 1s\n", "backends[0].sim.latency (line 5): field latency not found"},
		{"bad duration", "queue_timeout: 5\n", `queue_timeout (line 1): invalid duration "5"`},
		{"duration not scalar", "queue_timeout: [1s]\n", "queue_timeout (line 1): want a duration"},
		{"wrong type", "queue_capacity: lots\n", "queue_capacity (line 1): cannot unmarshal"},
		{"list wanted", "routes: 5\n", "routes (line 1): cannot unmarshal"},
		{"int32 overflow", route + "    max_tokens_limit: 99999999999\n", "cannot unmarshal"},
		{"price key", route + "    price:\n      input: 1\n", "routes[0].price.input (line 6): field input not found"},
		{"price input", route + "    price: {input_per_mtok: -1}\n", "routes[0].price.input_per_mtok: a price in USD per million tokens, at least 0, got -1"},
		{"price output", route + "    price: {output_per_mtok: .nan}\n", "routes[0].price.output_per_mtok: a price in USD per million tokens, at least 0, got NaN"},
		{"price discount", route + "    price: {input_per_mtok: 2.5, output_per_mtok: 10, batch_discount: 2}\n", "routes[0].price.batch_discount: a fraction of the online price from 0 to 1 (0.5: half price), got 2"},
		{"fraction in an integer", "backends:\n  - name: s\n    type: sim\n    max_concurrency: 0.5\n", "backends[0].max_concurrency (line 4): want a whole number, got 0.5"},
		{"fraction in a top integer", "queue_capacity: 12.5\n", "queue_capacity (line 1): want a whole number, got 12.5"},
		{"syntax", "routes: [\n", "yaml: "},
		{"two documents", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", "more than one YAML document"},
		// Top level.
		{"listen no port", "listen: localhost\n", `listen: must be host:port, got "localhost"`},
		{"listen bad port", "listen: localhost:99999\n", `listen: port must be 0 to 65535, got "99999"`},
		{"log level", "log: {level: loud}\n", `log.level: must be debug, info, warn or error, got "loud"`},
		{"log format", "log: {format: xml}\n", `log.format: must be json or text, got "xml"`},
		{"queue capacity", "queue_capacity: 0\n", "queue_capacity: must be at least 1, got 0"},
		{"queue timeout", "queue_timeout: 0s\n", "queue_timeout: must be positive, got 0s"},
		{"drain timeout", "drain_timeout: -1s\n", "drain_timeout: must be positive, got -1s"},
		{"aging step", "aging_step: 0s\n", "aging_step: must be positive"},
		{"idle lane", "idle_lane_timeout: 0s\n", "idle_lane_timeout: must be positive"},
		{"max lanes", "max_lanes: 0\n", "max_lanes: must be at least 1, got 0"},
		{"stream window", "stream_window: 0\n", "stream_window: must be at least 1, got 0"},
		{"summary interval", "summary_interval: 1ms\n", "summary_interval: must be 100ms to 1h0m0s, got 1ms"},
		// Backends.
		{"backend name", "backends:\n  - {type: sim}\n" + route, "backends[0].name: must not be empty"},
		{"backend twice", "backends:\n  - {name: sim, type: sim}\n  - {name: sim, type: sim}\n" + route, `backends[1].name: "sim" is already the name of backends[0]`},
		{"backend type", "backends:\n  - {name: sim, type: openia}\n" + route, `backends[0].type: unknown type "openia": want sim, openai or anthropic`},
		{"backend no type", "backends:\n  - {name: sim}\n" + route, "backends[0].type: must be set"},
		{"backend concurrency", "backends:\n  - {name: sim, type: sim, max_concurrency: -1}\n" + route, "backends[0].max_concurrency: must be 1 to 10000, got -1"},
		{"backend concurrency too high", "backends:\n  - {name: sim, type: sim, max_concurrency: 200000000}\n" + route, "backends[0].max_concurrency: must be 1 to 10000, got 200000000"},
		{"min concurrency", "backends:\n  - {name: sim, type: sim, max_concurrency: 4, min_concurrency: 5}\n" + route, "backends[0].min_concurrency: must be 1 to max concurrency 4, got 5"},
		{"min concurrency vs default", "backends:\n  - {name: sim, type: sim, min_concurrency: 9}\n" + route, "backends[0].min_concurrency: must be 1 to max concurrency 8, got 9"},
		{"core rpm", "backends:\n  - {name: sim, type: sim, rpm: -1}\n" + route, "backends[0].rpm: must not be negative, got -1"},
		{"core tpm", "backends:\n  - {name: sim, type: sim, tpm: -1}\n" + route, "backends[0].tpm: must not be negative, got -1"},
		{"core rpm burst", "backends:\n  - {name: sim, type: sim, rpm_burst: -1}\n" + route, "backends[0].rpm_burst: must be at least 1, got -1"},
		{"protected share", "backends:\n  - {name: sim, type: sim, protected_share: 0.95}\n" + route, "backends[0].protected_share: must be at most 0.9, got 0.95"},
		{"protected share nan", "backends:\n  - {name: sim, type: sim, protected_share: .nan}\n" + route, "backends[0].protected_share: must be at most 0.9, got NaN"},
		{"attempt timeout", "backends:\n  - {name: sim, type: sim, attempt_timeout: -1s}\n" + route, "backends[0].attempt_timeout: must be positive, got -1s"},
		{"retry backoff", "backends:\n  - {name: sim, type: sim, retry: {initial_backoff: -1s}}\n" + route, "backends[0].retry.initial_backoff: must be positive, got -1s"},
		{"retry factor", "backends:\n  - {name: sim, type: sim, retry: {factor: 0.5}}\n" + route, "backends[0].retry.factor: must be at least 1, got 0.5"},
		{"retry max backoff", "backends:\n  - {name: sim, type: sim, retry: {initial_backoff: 2s, max_backoff: 1s}}\n" + route, "backends[0].retry.max_backoff: must be at least the initial backoff 2s, got 1s"},
		{"retry budget ratio", "backends:\n  - {name: sim, type: sim, retry: {budget_ratio: 2}}\n" + route, "backends[0].retry.budget_ratio: must be 0 to 1, got 2"},
		{"retry budget window", "backends:\n  - {name: sim, type: sim, retry: {budget_window: -1s}}\n" + route, "backends[0].retry.budget_window: must be at least 1s, got -1s"},
		{"retry budget min", "backends:\n  - {name: sim, type: sim, retry: {budget_min: -1}}\n" + route, "backends[0].retry.budget_min: must not be negative, got -1"},
		{"breaker ratio", "backends:\n  - {name: sim, type: sim, breaker: {ratio: -0.5}}\n" + route, "backends[0].breaker.ratio: must be 0 to 1, got -0.5"},
		{"breaker window", "backends:\n  - {name: sim, type: sim, breaker: {window: 500ms}}\n" + route, "backends[0].breaker.window: must be at least 1s, got 500ms"},
		{"breaker min calls", "backends:\n  - {name: sim, type: sim, breaker: {min_calls: -1}}\n" + route, "backends[0].breaker.min_calls: must be at least 1, got -1"},
		{"breaker cooldown", "backends:\n  - {name: sim, type: sim, breaker: {cooldown: -1s}}\n" + route, "backends[0].breaker.cooldown: must be positive, got -1s"},
		{"breaker probes", "backends:\n  - {name: sim, type: sim, breaker: {probes: -1}}\n" + route, "backends[0].breaker.probes: must be at least 1, got -1"},
		{"sim latency", "backends:\n  - {name: sim, type: sim, sim: {base_latency: -1ms}}\n" + route, "backends[0].sim.base_latency: must not be negative, got -1ms"},
		{"sim rate", "backends:\n  - {name: sim, type: sim, sim: {failure_rate: 1.5}}\n" + route, "backends[0].sim.failure_rate: must be 0 to 1, got 1.5"},
		{"sim rpm", "backends:\n  - {name: sim, type: sim, sim: {rpm: -60}}\n" + route, "backends[0].sim.rpm: must not be negative, got -60"},
		{"sim model", "backends:\n  - {name: sim, type: sim, sim: {models: {e: {dimensions: 99999}}}}\n" + route, `backends[0].sim.models["e"].dimensions: must be 1 to 4096, got 99999`},
		// Routes.
		{"no routes", "routes: []\n", "routes: at least one route is needed"},
		{"route name", "routes:\n  - {operation: chat, backend: sim}\n", "routes[0].name: must not be empty"},
		{"route twice", route + "  - {name: r, operation: embedding, backend: sim}\n", `routes[1].name: "r" is already the name of routes[0]`},
		{"operation", "routes:\n  - {name: r, operation: chatt, backend: sim}\n", `routes[0].operation: must be chat, completion or embedding, got "chatt"`},
		{"unknown backend", "routes:\n  - {name: r, operation: chat, backend: gpt}\n", `routes[0].backend: no backend named "gpt" (defined: "sim")`},
		{"no backend", "routes:\n  - {name: r, operation: chat}\n", `routes[0].backend: must name a backend (defined: "sim")`},
		{"fallback backend", route + "    fallbacks:\n      - {backend: nope}\n", `routes[0].fallbacks[0].backend: no backend named "nope" (defined: "sim")`},
		{"window", route + "  - {name: s, operation: chat, backend: sim, batching: {window: -1s}}\n", "routes[1].batching.window: must be positive, got -1s"},
		{"max wait", route + "    batching: {window: 2s, max_wait: 1s}\n", "routes[0].batching.max_wait: must be at least the window 2s, got 1s"},
		{"max wait vs default window", route + "    batching: {max_wait: 50ms}\n", "routes[0].batching.max_wait: must be at least the window 100ms, got 50ms"},
		{"max batch size", route + "    batching: {max_batch_size: -1}\n", "routes[0].batching.max_batch_size: must be at least 1, got -1"},
		{"cache ttl", route + "    cache: {ttl: -1s}\n", "routes[0].cache.ttl: must be 0 to 720h0m0s, got -1s"},
		{"cache max bytes", route + "    cache: {max_bytes: -1}\n", "routes[0].cache.max_bytes: must not be negative, got -1"},
		{"cache budget", route + "cache: {max_bytes: 0}\n", "cache.max_bytes: must be at least 1, got 0"},
		{"min batch size", route + "    batching: {max_batch_size: 4, min_batch_size: 5}\n", "routes[0].batching.min_batch_size: must be 1 to max batch size 4, got 5"},
		{"min batch size vs default", route + "    batching: {min_batch_size: 11}\n", "routes[0].batching.min_batch_size: must be 1 to max batch size 10, got 11"},
		{"max batch tokens", route + "    batching: {max_batch_tokens: -5}\n", "routes[0].batching.max_batch_tokens: must not be negative, got -5"},
		{"max input bytes", route + "    max_input_bytes: -1\n", "routes[0].max_input_bytes: must be at least 1, got -1"},
		{"max tokens limit", route + "    max_tokens_limit: -1\n", "routes[0].max_tokens_limit: must be at least 1, got -1"},
		{"default max tokens", route + "    max_tokens_limit: 100\n    default_max_tokens: 200\n", "routes[0].default_max_tokens: must be 1 to max tokens limit 100, got 200"},
		{"default max tokens vs default limit", route + "    default_max_tokens: 40000\n", "routes[0].default_max_tokens: must be 1 to max tokens limit 32768, got 40000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func TestEveryErrorAtOnce(t *testing.T) {
	_, err := config.Parse([]byte("queue_capacity: 0\nstream_window: 0\nroutes:\n  - {name: r, operation: x, backend: y}\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"queue_capacity", "stream_window", "routes[0].operation", "routes[0].backend"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// FuzzLoadConfig feeds arbitrary YAML to Parse. It must never panic, and
// whatever it accepts the core must accept too.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(fullFile))
	f.Add([]byte(fullFileWithSpare()))
	f.Add([]byte(""))
	f.Add([]byte("routes:\n  - {name: r, operation: chat, backend: sim, batching: {window: 1s, max_wait: 1s}}\n"))
	f.Add([]byte("backends:\n  - {name: a, type: sim, sim: {native: true, models: {m: {dimensions: 8}}}}\nroutes:\n  - {name: r, operation: embedding, backend: a}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("listen: [\n"))
	f.Add([]byte("queue_timeout: 1h\nsummary_interval: 100ms\nlog: {level: WARN}\n"))
	f.Add([]byte(withOpenAI("{base_url: http://127.0.0.1:8080/v1, pack: {enabled: true, routes: [chat], max_items: 4}}")))
	f.Add([]byte(withOpenAI(`{base_url: "https://h/v1?api-version=1", api_key_env: K, api_key_header: api-key, headers: {X-A: b},
      organization: o, project: p, timeout: 1s, max_response_bytes: 10, max_fan_out: 2, max_idle_conns: 1,
      max_tokens_field: max_completion_tokens, pack: {max_tokens: 9, response_format: none}, tls: {ca_file: x}}`)))
	f.Add([]byte(withOpenAI("{base_url: ftp://h, pack: {routes: [embed, nope]}}")))
	f.Add([]byte(budgetWindowYAML))
	f.Add([]byte("backends:\n  - {name: s, type: sim, max_concurrency: 2.5, sim: {models: {m: {dimensions: 1.5}}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Error("an empty error message")
			}
			return
		}
		// Validation mirrors openai.New; what it cannot see is the
		// environment and the files a config names.
		b, err := c.Build()
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "APIKeyEnv: environment variable") && !strings.Contains(msg, ": tls.") {
				t.Fatalf("Build failed on a valid config: %v", err)
			}
			return
		}
		defer func() { _ = b.Close() }()
		core, err := batcher.New(b.Core...)
		if err != nil {
			t.Fatalf("batcher.New rejected a valid config: %v", err)
		}
		_ = core.Shutdown(t.Context())
	})
}

// TestExampleFile keeps the documented example file valid and equal to the
// defaults it claims to show.
func TestExampleFile(t *testing.T) {
	data, err := os.ReadFile("../../batcherd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	d, err := config.Default().Build()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Sims["sim"].Config(), d.Sims["sim"].Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("example sim %+v, default %+v", got, want)
	}
	if c.Listen != config.DefaultListen || c.DrainTimeout != config.Default().DrainTimeout || len(c.Routes) != 3 ||
		c.Telemetry != config.Default().Telemetry {
		t.Errorf("example %+v", c)
	}
	newCore(t, c)
}

// commentedSetting is a commented-out setting in the example file: "# key:"
// or "# - key:", indented as it would be.
var commentedSetting = regexp.MustCompile(`(?m)^(\s*)# ( *(?:- )?[a-z_]+:(?: |$).*)$`)

// TestExampleFileCommentedSettings uncomments every setting the example
// file shows commented out (the openai backends, the gpt-4o-mini route with
// its fallback, the retry and breaker defaults): they must make a valid
// config too, and the defaults they claim must be the core's.
func TestExampleFileCommentedSettings(t *testing.T) {
	data, err := os.ReadFile("../../batcherd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = commentedSetting.ReplaceAll(data, []byte("$1$2"))
	c, err := config.Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	byName := map[string]config.Backend{}
	for _, b := range c.Backends {
		byName[b.Name] = b
	}
	sim, oa, ollama := byName["sim"], byName["openai-main"], byName["ollama-local"]
	if oa.Type != config.TypeOpenAI || oa.OpenAI == nil || oa.OpenAI.BaseURL == "" || !oa.OpenAI.Pack.Enabled ||
		ollama.Type != config.TypeOpenAI || ollama.OpenAI == nil {
		t.Errorf("the openai backends did not come through: %+v, %+v", oa, ollama)
	}
	var route *config.Route
	for i := range c.Routes {
		if c.Routes[i].Name == "gpt-4o-mini" {
			route = &c.Routes[i]
		}
	}
	if route == nil || route.Backend != "openai-main" || route.Model != "gpt-4o-mini" || len(route.Fallbacks) != 1 || route.Fallbacks[0].Backend != "ollama-local" {
		t.Errorf("route gpt-4o-mini %+v", route)
	}
	wantRetry := config.Retry{
		MaxRetries: batcher.DefaultMaxRetries, InitialBackoff: config.Duration(batcher.DefaultInitialBackoff),
		Factor: batcher.DefaultBackoffFactor, MaxBackoff: config.Duration(batcher.DefaultMaxBackoff),
		BudgetRatio: batcher.DefaultRetryBudgetRatio, BudgetWindow: config.Duration(batcher.DefaultRetryWindow),
		BudgetMin: batcher.DefaultRetryBudgetMin,
	}
	if sim.Retry != wantRetry {
		t.Errorf("the example's retry %+v is not the core's defaults %+v", sim.Retry, wantRetry)
	}
	wantBreaker := config.Breaker{
		Consecutive: batcher.DefaultBreakerConsecutive, Ratio: batcher.DefaultBreakerRatio,
		Window: config.Duration(batcher.DefaultBreakerWindow), MinCalls: batcher.DefaultBreakerMinCalls,
		Cooldown: config.Duration(batcher.DefaultBreakerCooldown), Probes: batcher.DefaultBreakerProbes,
	}
	if sim.Breaker != wantBreaker {
		t.Errorf("the example's breaker %+v is not the core's defaults %+v", sim.Breaker, wantBreaker)
	}
	if sim.ProtectedShare != batcher.DefaultProtectedShare || sim.AttemptTimeout.D() != batcher.DefaultAttemptTimeout {
		t.Errorf("the example's protected_share %v, attempt_timeout %v: not the core's defaults", sim.ProtectedShare, sim.AttemptTimeout)
	}

	wantJobs := config.JobsLimits{MaxItems: jobs.DefaultMaxItems, MaxRunning: jobs.DefaultMaxRunning, MaxInFlight: jobs.DefaultMaxInFlight,
		ConcurrentRequests: jobs.DefaultConcurrentRequests, TTL: config.Duration(jobs.DefaultTTL), Lease: config.Duration(jobs.DefaultLease),
		OutputRoot: "/srv/batch-results"}
	if j := c.Jobs; j.DataDir == "" || j.JobStore != config.JobStoreSQLite || j.PostgresDSN == "" || j.Limits != wantJobs {
		t.Errorf("the example's jobs settings %+v; want data_dir, job_store, postgres_dsn and the jobs package's defaults %+v", j, wantJobs)
	}

	t.Setenv(oa.OpenAI.APIKeyEnv, "sk-test")
	if an := byName["anthropic-main"]; an.Type != config.TypeAnthropic || an.Anthropic == nil || an.Anthropic.Version != "2023-06-01" {
		t.Errorf("the anthropic backend did not come through: %+v", an)
	} else {
		t.Setenv(an.Anthropic.APIKeyEnv, "sk-ant-test")
	}
	b, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	core, err := batcher.New(b.Core...)
	if err != nil {
		t.Fatalf("batcher.New: %v", err)
	}
	_ = core.Shutdown(t.Context())
}

// TestLLMSimExampleFile keeps llmsim.example.yaml valid and pointed at
// cmd/llmsim's defaults: its address and its models.
func TestLLMSimExampleFile(t *testing.T) {
	c, err := config.Load([]string{"--config", "../../llmsim.example.yaml"}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var up *config.Backend
	for i := range c.Backends {
		if c.Backends[i].Type == config.TypeOpenAI {
			up = &c.Backends[i]
		}
	}
	if up == nil || up.OpenAI.BaseURL != "http://127.0.0.1:8080/v1" {
		t.Fatalf("no openai backend on llmsim's default address 127.0.0.1:8080: %+v", up)
	}
	ops := map[string]int{}
	var packed, fanOut bool
	for _, r := range c.Routes {
		if r.Backend != up.Name {
			continue
		}
		ops[r.Operation]++
		if !slices.Contains(llmsim.DefaultModels, r.Model) {
			t.Errorf("route %s asks for model %q; llmsim serves %v", r.Name, r.Model, llmsim.DefaultModels)
		}
		if r.Operation == "chat" {
			if slices.Contains(up.OpenAI.Pack.Routes, r.Name) {
				packed = true
			} else {
				fanOut = true
			}
			if len(r.Fallbacks) == 0 || r.Fallbacks[0].Backend != "sim" {
				t.Errorf("chat route %s has no fallback on the embedded sim: %+v", r.Name, r.Fallbacks)
			}
		}
	}
	if !up.OpenAI.Pack.Enabled || !packed || !fanOut || ops["completion"] != 1 || ops["embedding"] != 1 {
		t.Errorf("want a packed and a fan-out chat route, a completion and an embedding route; got %v (packed %v, fan-out %v)", ops, packed, fanOut)
	}
	b, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	core, err := batcher.New(b.Core...)
	if err != nil {
		t.Fatalf("batcher.New: %v", err)
	}
	_ = core.Shutdown(t.Context())
}
