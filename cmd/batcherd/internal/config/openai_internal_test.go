package config

import (
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/batcherhq/batcher/backend/openai"
)

// TestOpenAIConfigMapping checks that every key of an openai section lands
// in its openai.Config field, and the tracer provider with them.
func TestOpenAIConfigMapping(t *testing.T) {
	c, err := Parse([]byte(`
backends:
  - name: up
    type: openai
    openai:
      base_url: https://llm.example.com/v1?api-version=2024-10-21
      api_key_env: UP_KEY
      api_key_header: api-key
      headers: {X-Team: search, X-Env: prod}
      organization: org-1
      project: proj-1
      timeout: 15s
      max_response_bytes: 1048576
      max_fan_out: 4
      max_idle_conns: 32
      max_tokens_field: max_completion_tokens
      pack:
        enabled: true
        routes: [chat]
        max_items: 5
        max_tokens: 2000
        response_format: json_object
routes:
  - {name: chat, operation: chat, backend: up}
`))
	if err != nil {
		t.Fatal(err)
	}
	tp := noop.NewTracerProvider()
	got, err := c.Backends[0].OpenAI.openaiConfig(tp)
	if err != nil {
		t.Fatal(err)
	}
	want := openai.Config{
		BaseURL:          "https://llm.example.com/v1?api-version=2024-10-21",
		APIKeyEnv:        "UP_KEY",
		APIKeyHeader:     "api-key",
		Headers:          map[string]string{"X-Team": "search", "X-Env": "prod"},
		Organization:     "org-1",
		Project:          "proj-1",
		Timeout:          15 * time.Second,
		MaxResponseBytes: 1 << 20,
		MaxFanOut:        4,
		MaxIdleConns:     32,
		MaxTokensField:   "max_completion_tokens",
		Pack: openai.PackConfig{
			Enabled: true, Routes: []string{"chat"}, MaxItems: 5, MaxTokens: 2000, ResponseFormat: openai.FormatJSONObject,
		},
		TracerProvider: tp,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("openai.Config\n got %+v\nwant %+v", got, want)
	}

	// Left out, every field is zero: openai.New's defaults apply.
	c.Backends[0].OpenAI = &OpenAI{BaseURL: "http://h/v1"}
	if got, _ = c.Backends[0].OpenAI.openaiConfig(nil); !reflect.DeepEqual(got, openai.Config{BaseURL: "http://h/v1"}) {
		t.Errorf("a bare section gave %+v", got)
	}
}
