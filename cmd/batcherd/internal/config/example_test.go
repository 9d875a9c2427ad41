package config_test

import (
	"context"
	"fmt"
	"io"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

// A file overrides the defaults; the environment overrides the file.
func ExampleLoad() {
	lookup := func(k string) (string, bool) {
		if k == "BATCHER_LISTEN" {
			return "127.0.0.1:0", true
		}
		return "", false
	}
	c, err := config.Load([]string{"--drain-timeout=10s"}, lookup, io.Discard)
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Listen, c.DrainTimeout)
	for _, r := range c.Routes {
		fmt.Println(r.Name, r.Operation, r.Backend)
	}
	// Output:
	// 127.0.0.1:0 10s
	// sim-chat chat sim
	// sim-completion completion sim
	// sim-embed embedding sim
}

// A bad value fails, naming its path.
func ExampleParse() {
	_, err := config.Parse([]byte(`
routes:
  - name: chat
    operation: chat
    backend: sim
    batching:
      window: -1s
`))
	fmt.Println(err)
	// Output:
	// routes[0].batching.window: must be positive, got -1s
}

// Build turns a configuration into the core's options.
func ExampleConfig_Build() {
	b, err := config.Default().Build()
	if err != nil {
		panic(err)
	}
	core, err := batcher.New(b.Core...)
	if err != nil {
		panic(err)
	}
	defer func() { _ = core.Shutdown(context.Background()) }()
	fmt.Println(len(core.Routes()), b.Sims["sim"].Config().BaseLatency)
	// Output:
	// 3 50ms
}

// A route sends the model name callers use to an OpenAI-compatible
// upstream, with a local one as its fallback.
func ExampleParse_openai() {
	c, err := config.Parse([]byte(`
backends:
  - name: openai-main
    type: openai
    openai: {base_url: "https://api.openai.com/v1"}
  - name: ollama-local
    type: openai
    openai: {base_url: "http://127.0.0.1:11434/v1"}
routes:
  - name: gpt-4o-mini
    operation: chat
    backend: openai-main
    fallbacks: [{backend: ollama-local, model: llama3.2}]
`))
	if err != nil {
		panic(err)
	}
	r := c.Routes[0]
	fmt.Println(r.Name, "on", r.Backend, c.Backends[0].OpenAI.BaseURL, "else", r.Fallbacks[0].Backend, r.Fallbacks[0].Model)

	_, err = config.Parse([]byte(`
backends:
  - {name: openai-main, type: openai, openai: {api_key_env: OPENAI_API_KEY}}
routes:
  - {name: gpt-4o-mini, operation: chat, backend: openai-main}
`))
	fmt.Println(err)
	// Output:
	// gpt-4o-mini on openai-main https://api.openai.com/v1 else ollama-local llama3.2
	// backends[0].openai.base_url: must be set, for example https://api.openai.com/v1
}
