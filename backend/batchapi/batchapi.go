package batchapi

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// Errors of an Upstream.
var (
	// ErrNotFound: no file or batch matches (Find, FindFile, Get).
	ErrNotFound = errors.New("batchapi: not found")
	// ErrTooLarge: an input exceeds the provider's limits (Limits).
	ErrTooLarge = errors.New("batchapi: input over the provider's limits")
	// ErrUnsupported: the provider lacks the step (Upload without a file
	// API, an operation its batch API does not take).
	ErrUnsupported = errors.New("batchapi: not supported by the provider")
)

// Limits are a provider's bounds on one batch.
type Limits struct {
	// MaxRequests bounds the lines of one batch (OpenAI 50,000; Anthropic
	// 100,000).
	MaxRequests int
	// MaxBytes bounds one input file or batch body (OpenAI 200 MB;
	// Anthropic 256 MB).
	MaxBytes int64
	// Window is the completion window batches are created with (24h).
	Window time.Duration
	// Files says the provider takes the input as an uploaded file (Upload,
	// then Create with InputFileID); otherwise Create takes the input
	// itself (CreateRequest.Input).
	Files bool
	// Tagged says Find works: batches carry metadata the provider lists.
	Tagged bool
}

// Request is one line of an input file: a core request under a custom id.
type Request struct {
	CustomID string
	// Model is the provider's model name.
	Model string
	// Req holds the input and generation parameters; its other fields are
	// not read.
	Req *batcher.Request
	// MaxTokens is max_tokens when Req sets none (the route's default).
	MaxTokens int32
}

// Encoder writes input lines.
type Encoder interface {
	// Encode writes r as one line and returns the bytes written. A request
	// the provider's batch API cannot take is an error wrapping
	// batcher.ErrInvalid (nothing is written then).
	Encode(r *Request) (int, error)
}

// Status is where an upstream batch is.
type Status string

// The statuses, as OpenAI names them; others map onto them.
const (
	StatusValidating Status = "validating"
	StatusInProgress Status = "in_progress"
	StatusFinalizing Status = "finalizing"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
	StatusExpired    Status = "expired"
	StatusCancelling Status = "cancelling"
	StatusCancelled  Status = "cancelled"
)

// Terminal reports whether a batch in s changes no more: its results (if
// any) can be read.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusExpired || s == StatusCancelled
}

// Counts are a batch's requests by outcome so far.
type Counts struct {
	Total, Completed, Failed int64
}

// File is an uploaded input file.
type File struct {
	ID    string
	Name  string
	Bytes int64
}

// Batch is an upstream batch as the provider reports it.
type Batch struct {
	ID       string
	Status   Status
	Counts   Counts
	Metadata map[string]string
	// InputFileID, OutputFileID and ErrorFileID name its files (empty when
	// none, or without a file API).
	InputFileID  string
	OutputFileID string
	ErrorFileID  string
	CreatedAt    time.Time
	// InProgressAt is when it began running (zero: not yet); ExpiresAt
	// when its window ends.
	InProgressAt time.Time
	ExpiresAt    time.Time
	// Errors says why a FAILED batch failed (validation, a limit).
	Errors string
}

// ETA estimates when the batch ends from its progress: the rate of
// completed and failed requests since it began running. Zero: unknown.
func (b *Batch) ETA(now time.Time) time.Time {
	done := b.Counts.Completed + b.Counts.Failed
	if b.Status.Terminal() {
		return now
	}
	if b.InProgressAt.IsZero() || done == 0 || b.Counts.Total == 0 {
		return time.Time{}
	}
	el := now.Sub(b.InProgressAt)
	if el <= 0 {
		return time.Time{}
	}
	left := b.Counts.Total - done
	return now.Add(time.Duration(float64(el) * float64(left) / float64(done)))
}

// CreateRequest creates a batch.
type CreateRequest struct {
	// InputFileID is the uploaded input (providers with Limits.Files).
	InputFileID string
	// Input is the input itself (providers without a file API).
	Input io.Reader
	// Endpoint is the operation's path, as input lines name it
	// ("/v1/chat/completions"); see Endpoint.
	Endpoint string
	// Metadata tags the batch, so that Find finds it again.
	Metadata map[string]string
}

// Outcome is how one line ended.
type Outcome uint8

// The outcomes of a line.
const (
	// Succeeded: Resp holds the answer.
	Succeeded Outcome = iota
	// Failed: the provider answered the line with an error (Resp.Err).
	Failed
	// Expired: the batch's window ended before the line ran.
	Expired
	// Cancelled: the batch was cancelled before the line ran.
	Cancelled
)

// Result is one line of a batch's output or error file.
type Result struct {
	CustomID string
	Outcome  Outcome
	// Resp is the answer; Resp.Err is set unless Outcome is Succeeded.
	Resp batcher.Response
}

// Upstream is one provider account's batch API. Every method is safe for
// concurrent use and returns when ctx ends; errors from the provider are
// *batcher.UpstreamError (retryable or not by their class).
type Upstream interface {
	// Limits returns the provider's bounds.
	Limits() Limits
	// NewEncoder returns an encoder of input lines onto w.
	NewEncoder(w io.Writer) Encoder
	// Upload uploads an input file under name, streaming r (size bytes).
	Upload(ctx context.Context, name string, r io.Reader, size int64) (*File, error)
	// FindFile returns the newest batch input file uploaded under name,
	// or ErrNotFound.
	FindFile(ctx context.Context, name string) (*File, error)
	// Create creates a batch.
	Create(ctx context.Context, req *CreateRequest) (*Batch, error)
	// Get returns a batch, or ErrNotFound.
	Get(ctx context.Context, id string) (*Batch, error)
	// Find returns the newest batch created within since whose metadata
	// holds every entry of tags, or ErrNotFound.
	Find(ctx context.Context, tags map[string]string, since time.Duration) (*Batch, error)
	// List returns the batches created at or after since, newest first
	// (the provider's clock: CreatedAt). It is how a caller finds a batch
	// whose create call it cannot tell ended (a kill, a timeout): by its
	// tags, or, without tags, by when it was created and its size.
	List(ctx context.Context, since time.Time) ([]*Batch, error)
	// Results streams the lines of a terminal batch's output and error
	// files to fn, in no particular order, until fn returns an error
	// (Results returns it). Lines of the input that neither file holds are
	// not reported: the caller knows its input.
	Results(ctx context.Context, b *Batch, fn func(*Result) error) error
	// Cancel asks the provider to cancel a batch and returns it as it is
	// then (cancelling, or already terminal).
	Cancel(ctx context.Context, id string) (*Batch, error)
}

// Endpoint returns the input lines' endpoint of an operation: OpenAI's
// paths, which other providers map onto theirs.
func Endpoint(op batcher.Operation) string {
	switch op {
	case batcher.OpCompletion:
		return "/v1/completions"
	case batcher.OpEmbedding:
		return "/v1/embeddings"
	}
	return "/v1/chat/completions"
}
