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
	defer core.Shutdown(context.Background())
	fmt.Println(len(core.Routes()), b.Sims["sim"].Config().BaseLatency)
	// Output:
	// 3 50ms
}
