package openai_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// Example routes the model name callers use, gpt-4o-mini, to an
// OpenAI-compatible upstream (here an in-process llmsim) as sim-chat, with
// short requests packed three to a call.
func Example() {
	sim, _ := llmsim.New(llmsim.Config{ReplyTokens: 8})
	upstream := httptest.NewServer(sim)
	defer upstream.Close()
	defer sim.Close()

	be, err := openai.New(openai.Config{
		BaseURL: upstream.URL + "/v1", // e.g. https://api.openai.com/v1
		// APIKeyEnv: "OPENAI_API_KEY",
		Pack: openai.PackConfig{Enabled: true, MaxItems: 3},
	})
	if err != nil {
		panic(err)
	}
	defer func() { _ = be.Close() }()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "openai-main", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: "gpt-4o-mini", Op: batcher.OpChat, Backend: "openai-main", Model: "sim-chat",
			Batch: batcher.BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Second}}),
	)
	if err != nil {
		panic(err)
	}
	defer func() { _ = core.Shutdown(context.Background()) }()

	questions := []string{"Is Go fun?", "What is a batch?", "Why pack prompts?"}
	answers := make([]string, len(questions))
	done := make(chan struct{})
	for i, q := range questions {
		go func() {
			res, err := core.Do(context.Background(), &batcher.Request{
				Route: "gpt-4o-mini", Priority: batcher.PriorityNormal,
				Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: q}}},
			})
			if err != nil {
				answers[i] = err.Error()
			} else {
				answers[i] = fmt.Sprintf("%s (batch of %d)", res.Text, res.BatchSize)
			}
			done <- struct{}{}
		}()
	}
	for range questions {
		<-done
	}
	for _, a := range answers {
		fmt.Println(a)
	}
	st := be.Stats()
	fmt.Printf("upstream calls: %d, packs: %d\n", st.Calls, st.Packs)
	// Output:
	// echo: Is Go fun? | have more at (batch of 3)
	// echo: What is a batch? | only (batch of 3)
	// echo: Why pack prompts? | is in (batch of 3)
	// upstream calls: 1, packs: 1
}

func ExampleStatusClass() {
	for _, code := range []int{400, 401, 404, 408, 409, 429, 503} {
		fmt.Println(code, openai.StatusClass(code))
	}
	// Output:
	// 400 invalid_request
	// 401 auth
	// 404 not_found
	// 408 timeout
	// 409 server_error
	// 429 rate_limit
	// 503 server_error
}
