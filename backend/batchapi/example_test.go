package batchapi_test

import (
	"fmt"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
)

// A batch a quarter done after ten minutes of running ends in thirty more:
// the estimate a job's progress shows while its items wait upstream.
func ExampleBatch_ETA() {
	began := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	b := batchapi.Batch{
		Status:       batchapi.StatusInProgress,
		Counts:       batchapi.Counts{Total: 1000, Completed: 240, Failed: 10},
		InProgressAt: began,
	}
	now := began.Add(10 * time.Minute)
	fmt.Println(b.ETA(now).Sub(now))

	// Before the first answer the rate is unknown: no estimate.
	b.Counts = batchapi.Counts{Total: 1000}
	fmt.Println(b.ETA(now).IsZero())

	// A batch that ended changes no more.
	b.Status = batchapi.StatusExpired
	fmt.Println(b.Status.Terminal(), b.ETA(now).Equal(now))
	// Output:
	// 30m0s
	// true
	// true true
}
