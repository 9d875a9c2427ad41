package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

func TestSubmit(t *testing.T) {
	addr := startBatcherd(t, fastConfig)

	r := ctl(t, addr, "", "submit", "-m", "sim-chat", "Hello", "there")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Hello there") || r.stderr != "" {
		t.Errorf("chat: %+v; want the sim's text, which starts with the prompt", r)
	}

	r = ctl(t, addr, "", "submit", "-m", "sim-chat", "--id", "mine", "-p", "urgent", "--max-tokens", "5", "--metadata", "k=v", "-o", "json", "Hi")
	var comp batcherv1.Completion
	if err := protojson.Unmarshal([]byte(r.stdout), &comp); err != nil || r.code != 0 {
		t.Fatalf("-o json: %+v: %v", r, err)
	}
	if comp.GetId() != "mine" || comp.GetUsage().GetCompletionTokens() > 5 || comp.GetMetadata()["k"] != "v" || comp.GetText() == "" {
		t.Errorf("-o json: completion %v; want id mine, at most 5 tokens, metadata k=v", &comp)
	}

	r = ctl(t, addr, "the quick brown fox\n", "submit", "-m", "sim-embed", "--op", "embedding")
	var vec []float32
	if err := json.Unmarshal([]byte(r.stdout), &vec); err != nil || len(vec) != 32 || r.code != 0 {
		t.Errorf("embedding from stdin: %+v: %v; want a JSON array of 32 numbers", r, err)
	}

	plain := ctl(t, addr, "", "submit", "-m", "sim-chat", "stream", "me")
	r = ctl(t, addr, "", "submit", "-m", "sim-chat", "--stream", "stream", "me")
	if r.code != 0 || r.stdout != plain.stdout || r.stderr != "" {
		t.Errorf("--stream: %+v; want the text of the same prompt unstreamed, %q", r, plain.stdout)
	}

	r = ctl(t, addr, "", "submit", "-m", "nope", "Hi")
	if r.code != exitFailed || r.stdout != "" || !strings.Contains(r.stderr, `INVALID_ARGUMENT`) || !strings.Contains(r.stderr, `unknown model "nope"`) {
		t.Errorf("unknown model: %+v; want exit 1 naming the code and the model", r)
	}
}

func TestHealth(t *testing.T) {
	addr := startBatcherd(t, fastConfig) // and it checked health as text
	r := ctl(t, addr, "", "health", "-o", "json")
	var got struct{ Status string }
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Status != "SERVING" || r.code != 0 {
		t.Errorf("health -o json: %+v: %v", r, err)
	}
	r = ctl(t, addr, "", "health", "--service", "no.such.Service")
	if r.code != exitFailed || !strings.Contains(r.stderr, "NOT_FOUND") {
		t.Errorf("unknown service: %+v; want exit 1 with NOT_FOUND", r)
	}
}

func TestHealthUnreachable(t *testing.T) {
	r := ctl(t, "127.0.0.1:1", "", "--timeout", "5s", "health")
	if r.code != exitFailed || !strings.Contains(r.stderr, "UNAVAILABLE") {
		t.Errorf("nothing listening: %+v; want exit 1 with UNAVAILABLE", r)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "Hi"}, `--model: required`},
		{[]string{"submit", "-m", "x", "--op", "image", "Hi"}, `--op: must be chat, completion or embedding`},
		{[]string{"submit", "-m", "x", "-p", "soon", "Hi"}, `--priority: must be urgent`},
		{[]string{"submit", "-m", "x", "-o", "yaml", "Hi"}, `must be "text" or "json"`},
		{[]string{"submit", "-m", "x", "--op", "embedding", "--tools", "t.json", "Hi"}, "--tools, --tool-choice and --json-schema: only for --op chat, got --op embedding"},
		{[]string{"submit", "-m", "x", "--op", "completion", "--json-schema", "s.json", "Hi"}, "only for --op chat, got --op completion"},
		{[]string{"run"}, "takes 1 argument(s), got 0"},
		{[]string{"run", "a.jsonl", "--window", "0"}, "--window: must be at least 1"},
		{[]string{"run", "a.jsonl", "--resume"}, "--resume: needs a results file"},
		{[]string{"health", "extra"}, "takes no arguments"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"jobs", "nope"}, `unknown command "nope" for "batcherctl jobs"`},
		{[]string{"jobs", "get"}, "takes 1 argument(s), got 0"},
		{[]string{"jobs", "delete", "a", "b"}, "takes 1 argument(s), got 2"},
		{[]string{"--token", "t", "--token-file", "f", "health"}, "--token and --token-file: give one, not both"},
		{[]string{"--addr", "192.0.2.1:50051", "--token", "t", "health"}, "refusing to send a token in plaintext to 192.0.2.1:50051"},
		{[]string{"--nope"}, "unknown flag: --nope"},
		{[]string{"--tls-cert", "c.pem", "health"}, "--tls-cert and --tls-key go together"},
		{[]string{"--timeout", "-1s", "submit", "-m", "x", "Hi"}, "--timeout: must not be negative (0: none), got -1s"},
		{[]string{"--timeout", "-5m", "health"}, "--timeout: must not be negative"},
		{[]string{"stats", "--interval", "-1s", "--once"}, "--interval: must not be negative (0: the service's), got -1s"},
	} {
		addr := "127.0.0.1:1"
		if tc.args[0] == "--addr" {
			addr, tc.args = tc.args[1], tc.args[2:]
		}
		r := ctl(t, addr, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v; want exit 2 with %q", tc.args, r, tc.want)
		}
	}
}

// A usage error points at the help of the command that failed, where its
// flags are listed, not at the root's.
func TestUsageNamesCommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "-m", "x", "--nope", "Hi"}, "Run 'batcherctl submit --help' for usage."},
		{[]string{"jobs", "get"}, "Run 'batcherctl jobs get --help' for usage."},
		{[]string{"jobs", "nope"}, "Run 'batcherctl jobs --help' for usage."},
		{[]string{"nope"}, "Run 'batcherctl --help' for usage."},
	} {
		r := ctl(t, "127.0.0.1:1", "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v; want exit 2 with %q", tc.args, r, tc.want)
		}
	}
}

// A --json-schema file that is not JSON is reported as such, with where it
// breaks; one that is JSON but not an object, as not an object.
func TestSubmitJSONSchemaNotJSON(t *testing.T) {
	bad := writeFile(t, "bad.json", "{\n  \"type\": \"object\"\n  \"required\": []\n}")
	r := ctl(t, "127.0.0.1:1", "", "submit", "-m", "x", "--json-schema", bad, "Hi")
	want := bad + `: schema "response": not valid JSON: invalid character '"' after object key:value pair (line 3, column 3)`
	if r.code != exitUsage || !strings.Contains(r.stderr, want) {
		t.Errorf("schema file not JSON: %+v; want exit 2 with %q", r, want)
	}
	list := writeFile(t, "list.json", `["type", "object"]`)
	r = ctl(t, "127.0.0.1:1", "", "submit", "-m", "x", "--json-schema", list, "Hi")
	if r.code != exitUsage || !strings.Contains(r.stderr, `schema "response": must be a JSON object`) {
		t.Errorf("schema file a JSON array: %+v; want exit 2 saying it must be an object", r)
	}
}

// A --tools file that is not JSON, or not an array of tools, is reported
// with the file, line and column where it breaks.
func TestSubmitToolsNotJSON(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[\n  {\"name\": \"a\"\n   \"description\": \"b\"}\n]", `:3:4: want a JSON array of tools: invalid character '"' after object key:value pair`},
		{"[\n  {\"name\": 5}\n]", `:2:12: want a JSON array of tools: cannot unmarshal number into Go struct field`},
		{`[{"name": "a"}`, `:1:15: want a JSON array of tools: unexpected end of JSON input`},
	} {
		f := writeFile(t, "tools.json", tc.text)
		r := ctl(t, "127.0.0.1:1", "", "submit", "-m", "x", "--tools", f, "Hi")
		if want := "--tools: " + f + tc.want; r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("%q: %+v; want exit 2 with %q", tc.text, r, want)
		}
	}
}

// Every level's help has examples.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"submit", "--help"}, {"run", "--help"}, {"health", "--help"},
		{"jobs", "--help"}, {"jobs"}, {"jobs", "get", "--help"}, {"jobs", "delete", "--help"}} {
		r := ctl(t, "127.0.0.1:1", "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "batcherctl ") {
			t.Errorf("%v: exit %d, no examples:\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	// submit's retries of a quota's refusal are said, or a user over quota
	// sees it hang.
	if r := ctl(t, "127.0.0.1:1", "", "submit", "--help"); !strings.Contains(r.stdout, "RetryInfo") || !strings.Contains(r.stdout, "--timeout bounds the wait") {
		t.Errorf("submit --help does not say it retries a quota's refusal:\n%s", r.stdout)
	}
}

func TestTLSFlags(t *testing.T) {
	r := ctl(t, "127.0.0.1:1", "", "--tls-ca", "/nonexistent/ca.pem", "health")
	if r.code != exitFailed || !strings.Contains(r.stderr, "--tls-ca: open /nonexistent/ca.pem") {
		t.Errorf("missing CA file: %+v", r)
	}
	notPEM := writeFile(t, "ca.pem", "not a certificate")
	r = ctl(t, "127.0.0.1:1", "", "--tls-ca", notPEM, "health")
	if r.code != exitFailed || !strings.Contains(r.stderr, "holds no PEM certificate") {
		t.Errorf("CA file without a certificate: %+v", r)
	}
	// --tls against a plaintext service: the handshake fails, UNAVAILABLE.
	addr := startBatcherd(t, fastConfig)
	r = ctl(t, addr, "", "--tls", "--timeout", "10s", "health")
	if r.code != exitFailed || !strings.Contains(r.stderr, "UNAVAILABLE") {
		t.Errorf("TLS to a plaintext service: %+v", r)
	}
}

// TestSubmitToolsAndSchema: --tools and --json-schema reach the sim, which
// calls the tool and answers JSON that follows the schema.
func TestSubmitToolsAndSchema(t *testing.T) {
	addr := startBatcherd(t, fastConfig)
	tools := writeFile(t, "tools.json", `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris"]}},"required":["city"]}}}]`)
	schema := writeFile(t, "schema.json", `{"type":"object","properties":{"n":{"type":"integer","minimum":3,"maximum":3}},"required":["n"]}`)
	r := ctl(t, addr, "", "submit", "-m", "sim-chat", "--tools", tools, "Weather in Paris? Use get_weather.")
	if r.code != 0 || !strings.Contains(r.stdout, `get_weather({"city":"Paris"})`) {
		t.Errorf("--tools: %+v; want the call printed", r)
	}
	// Streamed, the call prints the same way (its arguments as they come).
	r = ctl(t, addr, "", "submit", "-m", "sim-chat", "--tools", tools, "--stream", "Weather in Paris? Use get_weather.")
	if r.code != 0 || !regexp.MustCompile(`^tool call \S+ get_weather\(\{"city":"Paris"\}\)\n$`).MatchString(r.stdout) {
		t.Errorf("--tools --stream: %+v; want the call printed as unstreamed", r)
	}
	r = ctl(t, addr, "", "submit", "-m", "sim-chat", "--json-schema", schema, "a number")
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"n":3}` {
		t.Errorf("--json-schema: %+v; want {\"n\":3}", r)
	}
	r = ctl(t, addr, "", "submit", "-m", "sim-chat", "--tool-choice", "f", "x")
	if r.code == 0 || !strings.Contains(r.stderr, "--tool-choice: needs --tools") {
		t.Errorf("--tool-choice alone: %+v", r)
	}
}

// TestSubmitTemperatureGivenIsSent: a --temperature given is sent as it
// is, a negative one too (for the service to refuse naming it), not
// dropped as if unset; one not given is not sent.
func TestSubmitTemperatureGivenIsSent(t *testing.T) {
	for _, tc := range []struct {
		f    submitFlags
		want *float32
	}{
		{submitFlags{model: "m", op: opChat}, nil},
		{submitFlags{model: "m", op: opChat, temperature: 0, setTemp: true}, new(float32)},
		{submitFlags{model: "m", op: opChat, temperature: -0.5, setTemp: true}, func() *float32 { v := float32(-0.5); return &v }()},
	} {
		r, err := tc.f.request("hi")
		if err != nil {
			t.Fatal(err)
		}
		var got *float32
		if p := r.GetParams(); p != nil {
			got = p.Temperature
		}
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("flags %+v: temperature %v, want %v", tc.f, got, tc.want)
		}
	}
}
