package cache_test

import (
	"context"
	"fmt"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cache"
)

type echo struct{}

func (echo) Dispatch(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	for i, r := range b.Requests {
		out[i].Embedding = []float32{float32(len(r.Input.Text))}
	}
	return nil
}

// A Batcher with a response cache in memory: the repeat is answered from it.
func Example() {
	c, err := cache.New(cache.WithMaxBytes(64 << 20))
	if err != nil {
		panic(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	b, err := batcher.New(
		batcher.WithCache(c),
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: echo{}}),
		batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "be"}),
	)
	if err != nil {
		panic(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()
	for range 2 {
		res, err := b.Do(context.Background(), &batcher.Request{Route: "embed",
			Input: batcher.Input{Op: batcher.OpEmbedding, Text: "hello"}})
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Embedding, "cached:", res.Cached)
	}
	// Output:
	// [5] cached: false
	// [5] cached: true
}
