package config_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/llmsim"
)

// withOpenAI is a config with a sim backend and an openai backend
// (backends[1], "openai-main") whose openai section is body, and routes
// chat and embed on it and other-chat on the sim.
func withOpenAI(body string) string {
	return `backends:
  - name: sim
    type: sim
  - name: openai-main
    type: openai
    openai: ` + body + `
routes:
  - {name: chat, operation: chat, backend: openai-main}
  - {name: embed, operation: embedding, backend: openai-main}
  - {name: other-chat, operation: chat, backend: sim}
`
}

func TestOpenAIFile(t *testing.T) {
	c, err := config.Parse([]byte(`
backends:
  - name: openai-main
    type: openai
    max_concurrency: 16
    rpm: 500
    openai:
      base_url: https://api.openai.com/v1
      api_key_env: OPENAI_API_KEY
      headers: {X-Team: search}
      timeout: 20s
      pack: {enabled: true, routes: [gpt-4o-mini], max_items: 8}
  - name: ollama-local
    type: openai
    openai: {base_url: "http://127.0.0.1:11434/v1"}
routes:
  - name: gpt-4o-mini
    operation: chat
    backend: openai-main
    model: gpt-4o-mini
    fallbacks: [{backend: ollama-local, model: llama3.2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Backends[0].OpenAI
	if o == nil || o.BaseURL != "https://api.openai.com/v1" || o.APIKeyEnv != "OPENAI_API_KEY" || o.Headers["X-Team"] != "search" ||
		o.Timeout.D() != 20*time.Second || !o.Pack.Enabled || len(o.Pack.Routes) != 1 || o.Pack.MaxItems != 8 {
		t.Errorf("openai section %+v", o)
	}
	if c.Backends[0].MaxConcurrency != 16 || c.Backends[0].RPM != 500 {
		t.Errorf("backend %+v", c.Backends[0])
	}
	if r := c.Routes[0]; r.Model != "gpt-4o-mini" || len(r.Fallbacks) != 1 || r.Fallbacks[0] != (config.Target{Backend: "ollama-local", Model: "llama3.2"}) {
		t.Errorf("route %+v", r)
	}

	t.Setenv("OPENAI_API_KEY", "sk-test")
	b, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(b.OpenAI) != 2 || b.OpenAI["openai-main"] == nil || b.OpenAI["ollama-local"] == nil || len(b.Sims) != 0 {
		t.Errorf("built openai %v, sims %v", b.OpenAI, b.Sims)
	}
	core, err := batcher.New(b.Core...)
	if err != nil {
		t.Fatalf("batcher.New rejected a valid config: %v", err)
	}
	if err := core.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenAIParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no section", strings.Replace(withOpenAI("{}"), "    openai: {}\n", "", 1), "backends[1].openai.base_url: must be set"},
		{"empty section", withOpenAI("{}"), "backends[1].openai.base_url: must be set"},
		{"scheme", withOpenAI("{base_url: ftp://h/v1}"), `backends[1].openai.base_url: must use scheme http or https, got "ftp"`},
		{"no host", withOpenAI(`{base_url: "http:///v1"}`), `backends[1].openai.base_url: must name a host, got "http:///v1"`},
		{"credentials", withOpenAI(`{base_url: "https://u:sk-x@h/v1"}`), "backends[1].openai.base_url: must not carry credentials"},
		{"not a url", withOpenAI(`{base_url: "http://[::1/v1"}`), "backends[1].openai.base_url: must be a URL: missing ']' in host"},
		{"key env name", withOpenAI(`{base_url: http://h/v1, api_key_env: "OPENAI KEY"}`), `backends[1].openai.api_key_env: must be an environment variable name such as OPENAI_API_KEY, got "OPENAI KEY"`},
		{"key header", withOpenAI(`{base_url: http://h/v1, api_key_header: "X Key"}`), `backends[1].openai.api_key_header: must be an HTTP header name, got "X Key"`},
		{"header name", withOpenAI(`{base_url: http://h/v1, headers: {"Bad Name": x}}`), `backends[1].openai.headers["Bad Name"]: must be an HTTP header name`},
		{"header value", withOpenAI(`{base_url: http://h/v1, headers: {X-A: "a\nb"}}`), `backends[1].openai.headers["X-A"]: must not hold control characters`},
		{"header carries key", withOpenAI(`{base_url: http://h/v1, api_key_env: K, headers: {authorization: x}}`), `backends[1].openai.headers["authorization"]: must not be the API key's header: the key comes from the environment variable K`},
		{"custom header carries key", withOpenAI(`{base_url: http://h/v1, api_key_env: K, api_key_header: api-key, headers: {Api-Key: x}}`), `backends[1].openai.headers["Api-Key"]: must not be the API key's header`},
		{"organization", withOpenAI(`{base_url: http://h/v1, organization: "a\rb"}`), "backends[1].openai.organization: must not hold control characters"},
		{"project", withOpenAI(`{base_url: http://h/v1, project: "a\x00b"}`), "backends[1].openai.project: must not hold control characters"},
		{"timeout", withOpenAI("{base_url: http://h/v1, timeout: -1s}"), "backends[1].openai.timeout: must not be negative, got -1s (0 takes the default, 1m0s)"},
		{"timeout not a duration", withOpenAI("{base_url: http://h/v1, timeout: 5}"), `backends[1].openai (line 6): invalid duration "5"`},
		{"max response bytes", withOpenAI("{base_url: http://h/v1, max_response_bytes: -1}"), "backends[1].openai.max_response_bytes: must not be negative, got -1"},
		{"max fan out", withOpenAI("{base_url: http://h/v1, max_fan_out: -2}"), "backends[1].openai.max_fan_out: must not be negative, got -2"},
		{"max idle conns", withOpenAI("{base_url: http://h/v1, max_idle_conns: -3}"), "backends[1].openai.max_idle_conns: must not be negative, got -3"},
		{"max tokens field", withOpenAI("{base_url: http://h/v1, max_tokens_field: max}"), `backends[1].openai.max_tokens_field: must be max_tokens or max_completion_tokens, got "max"`},
		{"pack max items low", withOpenAI("{base_url: http://h/v1, pack: {max_items: 1}}"), "backends[1].openai.pack.max_items: must be 2 to 1000, got 1"},
		{"pack max items high", withOpenAI("{base_url: http://h/v1, pack: {max_items: 1001}}"), "backends[1].openai.pack.max_items: must be 2 to 1000, got 1001"},
		{"pack max tokens", withOpenAI("{base_url: http://h/v1, pack: {max_tokens: -1}}"), "backends[1].openai.pack.max_tokens: must not be negative, got -1"},
		{"pack response format", withOpenAI("{base_url: http://h/v1, pack: {response_format: xml}}"), `backends[1].openai.pack.response_format: must be json_schema, json_object or none, got "xml"`},
		{"pack route empty", withOpenAI(`{base_url: http://h/v1, pack: {enabled: true, routes: [""]}}`), "backends[1].openai.pack.routes[0]: must not be empty"},
		{"pack route twice", withOpenAI("{base_url: http://h/v1, pack: {routes: [chat, chat]}}"), `backends[1].openai.pack.routes[1]: must not list "chat" twice`},
		{"pack route unknown", withOpenAI("{base_url: http://h/v1, pack: {routes: [chta]}}"), `backends[1].openai.pack.routes[0]: no route named "chta"`},
		{"pack route not chat", withOpenAI("{base_url: http://h/v1, pack: {routes: [chat, embed]}}"), `backends[1].openai.pack.routes[1]: route "embed" is a embedding route: only chat is packed`},
		{"pack route elsewhere", withOpenAI("{base_url: http://h/v1, pack: {routes: [other-chat]}}"), `backends[1].openai.pack.routes[0]: route "other-chat" does not send to backend "openai-main"`},
		{"tls over http", withOpenAI("{base_url: http://h/v1, tls: {ca_file: ca.pem}}"), `backends[1].openai.tls: only for an https base_url, got scheme "http"`},
		{"tls cert without key", withOpenAI("{base_url: https://h/v1, tls: {cert_file: c.pem}}"), "backends[1].openai.tls: cert_file and key_file go together"},
		{"unknown key", withOpenAI("{base_url: http://h/v1, api_key: sk-x}"), "backends[1].openai (line 6): field api_key not found"},
		{"unknown pack key", withOpenAI("{base_url: http://h/v1, pack: {on: true}}"), "field on not found"},
		{"sim section on openai", strings.Replace(withOpenAI("{base_url: http://h/v1}"), "    openai:", "    sim: {}\n    openai:", 1), `backends[1].sim: only for type sim, got type "openai"`},
		{"openai section on sim", strings.Replace(withOpenAI("{base_url: http://h/v1}"), "    type: sim\n", "    type: sim\n    openai: {base_url: http://h/v1}\n", 1), `backends[0].openai: only for type openai, got type "sim"`},
		{"unknown type", strings.Replace(withOpenAI("{base_url: http://h/v1}"), "type: openai", "type: openia", 1), `backends[1].type: unknown type "openia": want sim, openai or anthropic`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// A pack route may be one that reaches the backend as a fallback: the
// batch carries the name callers used.
func TestOpenAIPackRouteByFallback(t *testing.T) {
	y := strings.Replace(withOpenAI("{base_url: http://h/v1, pack: {enabled: true, routes: [other-chat]}}"),
		"backend: sim}", "backend: sim, fallbacks: [{backend: openai-main}]}", 1)
	if _, err := config.Parse([]byte(y)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAIKeyEnv(t *testing.T) {
	file := writeFile(t, withOpenAI("{base_url: http://h/v1, api_key_env: BATCHERD_TEST_KEY}"))
	_, err := config.Load([]string{"--config", file}, env(), io.Discard)
	if want := "backends[1].openai.api_key_env: environment variable BATCHERD_TEST_KEY is empty or unset"; err == nil || err.Error() != want {
		t.Errorf("key unset: got %v, want %q", err, want)
	}
	if _, err := config.Load([]string{"--config", file}, env("BATCHERD_TEST_KEY", ""), io.Discard); err == nil {
		t.Error("key empty: no error")
	}
	if _, err := config.Load([]string{"--config", file}, env("BATCHERD_TEST_KEY", "sk-test"), io.Discard); err != nil {
		t.Errorf("key set: %v", err)
	}
}

// Build's errors from openai.New name the backend by index and name.
func TestOpenAIBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"key unset", "{base_url: http://h/v1, api_key_env: BATCHERD_TEST_UNSET_KEY}",
			"backends[1] (openai-main): openai: APIKeyEnv: environment variable BATCHERD_TEST_UNSET_KEY is empty or unset"},
		{"ca file missing", "{base_url: https://h/v1, tls: {ca_file: /nonexistent/ca.pem}}",
			"backends[1] (openai-main): tls.ca_file: open /nonexistent/ca.pem"},
		{"ca file not pem", "{base_url: https://h/v1, tls: {ca_file: " + writeFile(t, "not a certificate") + "}}",
			"backends[1] (openai-main): tls.ca_file: "},
		{"client cert missing", "{base_url: https://h/v1, tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}}",
			"backends[1] (openai-main): tls.cert_file, tls.key_file: open /nonexistent/c.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(withOpenAI(tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err = c.Build(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got %v\nwant an error starting %q", err, tc.want)
			}
		})
	}
}

// seen is what an upstream call carried.
type seen struct {
	path, query string
	header      http.Header
	body        map[string]any
}

// recorder serves llmsim and records every call.
type recorder struct {
	sim *llmsim.Server
	mu  sync.Mutex
	got []seen
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	r.mu.Lock()
	r.got = append(r.got, seen{req.URL.Path, req.URL.RawQuery, req.Header.Clone(), body})
	r.mu.Unlock()
	req.Body = io.NopCloser(strings.NewReader(string(raw)))
	r.sim.ServeHTTP(w, req)
}

func (r *recorder) calls() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.got...)
}

// startUpstream serves a recording llmsim on loopback until the test ends.
func startUpstream(t *testing.T, cfg llmsim.Config, tls bool) (*recorder, *httptest.Server) {
	t.Helper()
	sim, err := llmsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{sim: sim}
	ts := httptest.NewUnstartedServer(rec)
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected
	if tls {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(func() {
		sim.Close()
		ts.Close()
	})
	return rec, ts
}

// startCore builds c and starts its core until the test ends.
func startCore(t *testing.T, c *config.Config, opts ...config.BuildOption) (*batcher.Batcher, *config.Built) {
	t.Helper()
	b, err := c.Build(opts...)
	if err != nil {
		t.Fatal(err)
	}
	core, err := batcher.New(b.Core...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := core.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return core, b
}

func chat(route, prompt string) *batcher.Request {
	return &batcher.Request{Route: route, Priority: batcher.PriorityNormal,
		Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: prompt}}}}
}

// TestOpenAIReachesUpstream checks, on the wire, that the key, headers,
// organization, project, the base URL's query, max_tokens_field and
// packing of a YAML section reach the upstream.
func TestOpenAIReachesUpstream(t *testing.T) {
	rec, ts := startUpstream(t, llmsim.Config{ReplyTokens: 8}, false)
	t.Setenv("BATCHERD_TEST_KEY", "sk-secret")
	c, err := config.Parse([]byte(fmt.Sprintf(`
backends:
  - name: up
    type: openai
    openai:
      base_url: %s/v1?api-version=2024-10-21
      api_key_env: BATCHERD_TEST_KEY
      api_key_header: api-key
      headers: {X-Team: search}
      organization: org-1
      project: proj-1
      max_tokens_field: max_completion_tokens
      pack: {enabled: true, routes: [packed], max_items: 3}
routes:
  - name: packed
    operation: chat
    backend: up
    model: sim-chat
    batching: {max_batch_size: 3, min_batch_size: 3, window: 1m}
  - name: single
    operation: chat
    backend: up
    model: sim-chat
    batching: {max_batch_size: 1, min_batch_size: 1}
`, ts.URL)))
	if err != nil {
		t.Fatal(err)
	}
	core, built := startCore(t, c)

	res, err := core.Do(t.Context(), chat("single", "Hello there"))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := llmsim.Reply("Hello there", 256, 8); res.Text != want {
		t.Errorf("text %q, want llmsim's %q", res.Text, want)
	}
	calls := rec.calls()
	if len(calls) != 1 {
		t.Fatalf("%d upstream calls, want 1", len(calls))
	}
	got := calls[0]
	if got.path != "/v1/chat/completions" || got.query != "api-version=2024-10-21" {
		t.Errorf("call to %s?%s", got.path, got.query)
	}
	for k, want := range map[string]string{
		"Api-Key": "sk-secret", "Authorization": "", "X-Team": "search", "Openai-Organization": "org-1", "Openai-Project": "proj-1",
	} {
		if v := got.header.Get(k); v != want {
			t.Errorf("header %s: %q, want %q", k, v, want)
		}
	}
	if _, ok := got.body["max_completion_tokens"]; !ok || got.body["model"] != "sim-chat" {
		t.Errorf("body %v: want model sim-chat and max_completion_tokens", got.body)
	}

	// Three requests make one batch, and one packed call.
	prompts := []string{"one?", "two?", "three?"}
	errc := make(chan error, len(prompts))
	for _, p := range prompts {
		go func() {
			res, err := core.Do(t.Context(), chat("packed", p))
			if want, _ := llmsim.Reply(p, 256, 8); err == nil && res.Text != want {
				err = fmt.Errorf("%s: text %q, want %q", p, res.Text, want)
			}
			errc <- err
		}()
	}
	for range prompts {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	if st := built.OpenAI["up"].Stats(); st.Packs != 1 || st.PackedItems != 3 || st.Calls != 2 {
		t.Errorf("stats %+v, want 2 calls, one of them a pack of 3", st)
	}
}

// TestOpenAITLSCAFile trusts the test server's certificate from ca_file.
func TestOpenAITLSCAFile(t *testing.T) {
	_, ts := startUpstream(t, llmsim.Config{}, true)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("{base_url: %s/v1, tls: {ca_file: %s}}", ts.URL, ca)
	c, err := config.Parse([]byte(strings.ReplaceAll(withOpenAI(body), "operation: embedding, backend: openai-main", "operation: embedding, backend: openai-main, model: sim-embedding")))
	if err != nil {
		t.Fatal(err)
	}
	core, _ := startCore(t, c)
	res, err := core.Do(t.Context(), &batcher.Request{Route: "embed", Priority: batcher.PriorityNormal,
		Input: batcher.Input{Op: batcher.OpEmbedding, Text: "hi"}})
	if err != nil {
		t.Fatalf("over TLS with the CA file: %v", err)
	}
	if len(res.Embedding) != llmsim.DefaultEmbeddingDim {
		t.Errorf("embedding of %d", len(res.Embedding))
	}

	// Without it, the system's roots do not know the test CA (and the
	// failure is not retried, to keep the test fast).
	y := strings.ReplaceAll(withOpenAI(fmt.Sprintf("{base_url: %s/v1}", ts.URL)),
		"operation: embedding, backend: openai-main", "operation: embedding, backend: openai-main, model: sim-embedding")
	y = strings.Replace(y, "    type: openai\n", "    type: openai\n    retry: {max_retries: -1}\n", 1)
	if c, err = config.Parse([]byte(y)); err != nil {
		t.Fatal(err)
	}
	core, _ = startCore(t, c)
	if _, err := core.Do(t.Context(), &batcher.Request{Route: "embed", Priority: batcher.PriorityNormal,
		Input: batcher.Input{Op: batcher.OpEmbedding, Text: "hi"}, Timeout: 10 * time.Second}); err == nil {
		t.Error("an unknown CA was trusted")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Logf("without the CA file: %v", err)
	}
}

// TestOpenAITracing: with the daemon's tracer provider, each upstream call
// is a span whose parent is the batch's span; without one, no span is
// made, even when a global provider is set.
func TestOpenAITracing(t *testing.T) {
	_, ts := startUpstream(t, llmsim.Config{}, false)
	yaml := fmt.Sprintf(`
backends:
  - {name: up, type: openai, openai: {base_url: %s/v1}}
routes:
  - {name: chat, operation: chat, backend: up, model: sim-chat, batching: {max_batch_size: 1, min_batch_size: 1}}
`, ts.URL)

	global := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(global)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	c, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	core, _ := startCore(t, c, config.WithTracerProvider(tp))
	if _, err := core.Do(t.Context(), chat("chat", "trace me")); err != nil {
		t.Fatal(err)
	}
	var batch, upstream sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		switch {
		case strings.HasPrefix(s.Name(), "batcher.batch"):
			batch = s
		case s.Name() == "openai POST /v1/chat/completions":
			upstream = s
		}
	}
	if batch == nil || upstream == nil {
		var names []string
		for _, s := range sr.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("spans %q: want a batch span and an upstream span", names)
	}
	if upstream.Parent().SpanID() != batch.SpanContext().SpanID() || upstream.SpanContext().TraceID() != batch.SpanContext().TraceID() {
		t.Errorf("the upstream span's parent is %v, want the batch span %v", upstream.Parent(), batch.SpanContext())
	}

	// Tracing off: the global provider records nothing of ours.
	c, err = config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	core, _ = startCore(t, c)
	if _, err := core.Do(t.Context(), chat("chat", "no trace")); err != nil {
		t.Fatal(err)
	}
	if n := len(global.Ended()); n != 0 {
		t.Errorf("tracing off, yet %d spans reached the global provider", n)
	}
}
