package openaiapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/openaiapi"
)

// A Handler puts the OpenAI API in front of a core: any OpenAI client
// pointed at it gets batching.
func Example() {
	upper := batcher.BackendFunc(func(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
		for i, r := range b.Requests {
			out[i].Text = strings.ToUpper(r.Input.Messages[0].Content)
			out[i].FinishReason = batcher.FinishStop
		}
		return nil
	})
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "upper", Backend: upper}),
		batcher.WithRoute(batcher.Route{Name: "shout", Op: batcher.OpChat, Backend: "upper"}),
	)
	if err != nil {
		panic(err)
	}
	defer func() { _ = core.Shutdown(context.Background()) }()
	h, err := openaiapi.New(core)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"shout","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		panic(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"content":"HELLO"`))
	// Output: 200 true
}
