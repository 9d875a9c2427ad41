package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/openaiapi"
)

// TestBatchErrMessages: each refusal of the job manager reaches the Batch
// API as its kind, with a message naming the cause and nothing of the
// jobs package's text ("jobs: ", the kind's own words).
func TestBatchErrMessages(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		kind error
		msg  string
	}{
		{"not found", jobs.ErrNotFound, openaiapi.ErrBatchNotFound, "job not found"},
		{"forbidden", fmt.Errorf("line 2 (custom_id %q): %w", "a", &batcher.AccessError{Tenant: "t", Route: "m"}), openaiapi.ErrBatchForbidden, `line 2 (custom_id "a")`},
		{"items quota", fmt.Errorf("line 11: %w", &jobs.QuotaError{Tenant: "t", Quota: jobs.QuotaItemsPerJob, Limit: 10}),
			openaiapi.ErrBatchItemsQuota, `tenant "t": quota items_per_job exceeded: the job has more than the limit of 10 items`},
		{"jobs quota", &jobs.QuotaError{Tenant: "t", Quota: jobs.QuotaJobs, Limit: 2, RetryAfter: jobs.QuotaRetryAfter},
			openaiapi.ErrBatchQuota, `tenant "t": quota jobs exceeded: limit 2 jobs not ended at once`},
		{"empty", fmt.Errorf("%w: send at least one item after the spec", jobs.ErrEmpty), openaiapi.ErrBatchInvalid, "the input file holds no requests"},
		{"too many", &jobs.KindError{Kind: jobs.ErrTooManyItems, Reason: "more than 5 items (the server's limit)"}, openaiapi.ErrBatchInvalid,
			"the input file has more than 5 items (the server's limit)"},
		{"invalid", &jobs.KindError{Kind: jobs.ErrInvalid, Reason: "line 3: body.messages: must be set"}, openaiapi.ErrBatchInvalid, "line 3: body.messages: must be set"},
		{"closed", jobs.ErrClosed, openaiapi.ErrBatchClosed, "server shutting down: retry against another instance"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := batchErr(tt.err)
			var be *openaiapi.BatchError
			if !errors.As(err, &be) || !errors.Is(err, tt.kind) {
				t.Fatalf("batchErr(%v) = %v, want a BatchError of kind %v", tt.err, err, tt.kind)
			}
			if !strings.HasPrefix(be.Message, tt.msg) || strings.Contains(be.Message, "jobs: ") || strings.HasPrefix(be.Message, "invalid: ") {
				t.Errorf("message %q, want %q without the jobs package's words", be.Message, tt.msg)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("batchErr(%v) no longer wraps the manager's error", tt.err)
			}
		})
	}
	if other := errors.New("disk"); batchErr(other) != other { //nolint:errorlint // identity, not errors.Is: it must come back unwrapped
		t.Error("an error of no kind is not returned as it is")
	}
}
