package batcher_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// An upper-casing backend that answers a whole batch in one call.
func upper(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	for i, r := range b.Requests {
		out[i].Text = strings.ToUpper(r.Input.Prompt)
	}
	return nil
}

func Example() {
	b, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "upper", Backend: batcher.BackendFunc(upper)}),
		batcher.WithRoute(batcher.Route{Name: "shout", Op: batcher.OpCompletion, Backend: "upper"}),
	)
	if err != nil {
		panic(err)
	}
	defer func() { _ = b.Shutdown(context.Background()) }()

	res, err := b.Do(context.Background(), &batcher.Request{
		ID:       "greeting",
		Route:    "shout",
		Priority: batcher.PriorityUrgent, // leaves at once
		Input:    batcher.Input{Op: batcher.OpCompletion, Prompt: "hello"},
	})
	fmt.Println(res.Text, err, res.Attempts)
	// Output: HELLO <nil> 1
}

func ExampleBatcher_Submit() {
	b, _ := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "upper", Backend: batcher.BackendFunc(upper)}),
		batcher.WithRoute(batcher.Route{Name: "shout", Op: batcher.OpCompletion, Backend: "upper",
			Batch: batcher.BatchConfig{MaxBatchSize: 3, MinBatchSize: 3, Window: time.Hour}}),
	)
	var calls []*batcher.Call
	for _, w := range []string{"one", "two", "three"} {
		c, err := b.Submit(context.Background(), &batcher.Request{
			ID: w, Route: "shout", Input: batcher.Input{Op: batcher.OpCompletion, Prompt: w},
		})
		if err != nil {
			panic(err)
		}
		calls = append(calls, c)
	}
	for _, c := range calls {
		r := c.Result()
		fmt.Println(c.Request().ID, r.Text, r.BatchSize)
	}
	_ = b.Shutdown(context.Background())
	// Output:
	// one ONE 3
	// two TWO 3
	// three THREE 3
}

func ExampleValidationError() {
	b, _ := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "upper", Backend: batcher.BackendFunc(upper)}),
		batcher.WithRoute(batcher.Route{Name: "shout", Op: batcher.OpCompletion, Backend: "upper"}),
	)
	defer func() { _ = b.Shutdown(context.Background()) }()
	_, err := b.Submit(context.Background(), &batcher.Request{Route: "whisper"})
	fmt.Println(err)
	// Output: model: unknown model "whisper"
}
