package main

import (
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestCountsTextAddsUp: a cancelled job's line says what its done items
// were, not "1/1 done, 0 succeeded, 0 failed".
func TestCountsTextAddsUp(t *testing.T) {
	for _, tc := range []struct {
		c    *batcherv1.JobCounts
		want string
	}{
		{&batcherv1.JobCounts{Total: 5, Succeeded: 5}, "5/5 done, 5 succeeded, 0 failed"},
		{&batcherv1.JobCounts{Total: 1, Cancelled: 1}, "1/1 done, 0 succeeded, 0 failed, 1 cancelled"},
		{&batcherv1.JobCounts{Total: 9, Succeeded: 2, Failed: 1, Cancelled: 3, Expired: 2, Pending: 1}, "8/9 done, 2 succeeded, 1 failed, 3 cancelled, 2 expired"},
	} {
		if got := countsText(tc.c); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
