package anthropic_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/batcherhq/batcher/backend/anthropic"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// An Anthropic backend behind a Batcher route, here against llmsim's
// /v1/messages; against Anthropic itself leave BaseURL empty and set
// APIKeyEnv to ANTHROPIC_API_KEY.
func Example() {
	sim, _ := llmsim.New(llmsim.Config{})
	defer sim.Close()
	srv := httptest.NewServer(sim)
	defer srv.Close()

	be, err := anthropic.New(anthropic.Config{BaseURL: srv.URL})
	if err != nil {
		panic(err)
	}
	defer func() { _ = be.Close() }()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "anthropic", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: "claude-sonnet", Op: batcher.OpChat, Backend: "anthropic", Model: "sim-chat", DefaultMaxTokens: 8}))
	if err != nil {
		panic(err)
	}
	defer func() { _ = core.Shutdown(context.Background()) }()

	res, err := core.Do(context.Background(), &batcher.Request{Route: "claude-sonnet", Input: batcher.Input{Op: batcher.OpChat,
		Messages: []batcher.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello"}}}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Text)
	fmt.Println(res.FinishReason == batcher.FinishLength, res.Usage.CompletionTokens)
	// Output:
	// echo: Hello | then all some so u
	// true 8
}
