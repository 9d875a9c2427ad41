package fleet_test

import (
	"context"
	"log"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/fleet"
)

// Each replica opens the same Redis with the same prefix and hands the
// Fleet to its Batcher: the backends' budgets are then the fleet's.
func Example() {
	f, err := fleet.Open("redis://127.0.0.1:6379/0", fleet.WithPrefix("batcher"))
	if err != nil {
		log.Fatal(err)
	}
	b, err := batcher.New(
		batcher.WithCoordinator(f),
		batcher.WithBackend(batcher.BackendConfig{Name: "openai", Backend: nil /* your backend */, RPM: 600, TPM: 200_000}),
		batcher.WithRoute(batcher.Route{Name: "gpt", Op: batcher.OpChat, Backend: "openai"}),
	)
	if err != nil {
		log.Fatal(err)
	}
	f.Start(context.Background()) // joins; Redis away means local shares, not an error
	// ... serve ...
	_ = b.Shutdown(context.Background())
	_ = f.Close(context.Background())
}
