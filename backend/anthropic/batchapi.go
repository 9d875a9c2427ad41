package anthropic

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/batcherhq/batcher/backend/batchapi"
	"github.com/batcherhq/batcher/batcher"
)

// BatchWindow is the time Anthropic gives a Message Batch.
const BatchWindow = 24 * time.Hour

// Batches is the Backend's account seen through package batchapi's
// Upstream: Anthropic's Message Batches (batches.go). It shares the
// Backend's base URL, key, headers and connection pool. Anthropic has no
// file API (Upload and FindFile are batchapi.ErrUnsupported: Create takes
// the input itself) and its batches carry no metadata (Limits.Tagged is
// false; Find is batchapi.ErrUnsupported, and CreateRequest.Metadata is
// not sent: the caller records the batch id it gets, and finds a batch it
// did not record with List).
type Batches struct {
	b *Backend
}

var _ batchapi.Upstream = (*Batches)(nil)

// Batches returns the Backend's batch API.
func (b *Backend) Batches() *Batches { return &Batches{b: b} }

// Limits returns Anthropic's: 100,000 requests and 256 MB a batch, 24h,
// no files, no tags.
func (u *Batches) Limits() batchapi.Limits {
	return batchapi.Limits{MaxRequests: BatchMaxRequests, MaxBytes: BatchMaxBytes, Window: BatchWindow}
}

type batchEncoder struct {
	u *Batches
	w io.Writer
}

// NewEncoder returns an encoder of Message Batch lines ({custom_id,
// params}), which Create streams into the batch's requests array.
func (u *Batches) NewEncoder(w io.Writer) batchapi.Encoder { return &batchEncoder{u: u, w: w} }

// Encode writes one line: the params the online call would send.
func (e *batchEncoder) Encode(r *batchapi.Request) (int, error) {
	if r.Req.Input.Op != batcher.OpChat {
		return 0, fmt.Errorf("%w: Anthropic's Message Batches take chat only, not %v", batchapi.ErrUnsupported, r.Req.Input.Op)
	}
	if !customIDOK(r.CustomID) {
		return 0, fmt.Errorf("%w: custom_id: must be 1 to 64 letters, digits, - or _, got %q", batcher.ErrInvalid, clip(r.CustomID, 80))
	}
	return e.u.b.EncodeBatchRequest(e.w, &BatchRequest{CustomID: r.CustomID, Model: r.Model, Req: r.Req, MaxTokens: r.MaxTokens})
}

// customIDOK reports whether id is what Anthropic takes as a custom_id.
func customIDOK(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !customIDRune(c) {
			return false
		}
	}
	return true
}

// customIDRune reports whether c may appear in an Anthropic custom_id.
func customIDRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Upload is batchapi.ErrUnsupported: Anthropic has no file API.
func (u *Batches) Upload(context.Context, string, io.Reader, int64) (*batchapi.File, error) {
	return nil, fmt.Errorf("%w: Anthropic's Message Batches take their input in the create call", batchapi.ErrUnsupported)
}

// FindFile is batchapi.ErrUnsupported: Anthropic has no file API.
func (u *Batches) FindFile(context.Context, string) (*batchapi.File, error) {
	return nil, fmt.Errorf("%w: Anthropic has no file API", batchapi.ErrUnsupported)
}

// Create creates a batch from req.Input, the encoder's lines.
func (u *Batches) Create(ctx context.Context, req *batchapi.CreateRequest) (*batchapi.Batch, error) {
	if req.Input == nil {
		return nil, fmt.Errorf("%w: Anthropic's Message Batches take the input itself, not a file id", batchapi.ErrUnsupported)
	}
	if req.Endpoint != "" && req.Endpoint != batchapi.Endpoint(batcher.OpChat) {
		return nil, fmt.Errorf("%w: Anthropic's Message Batches take chat only, not %s", batchapi.ErrUnsupported, req.Endpoint)
	}
	m, err := u.b.CreateBatch(ctx, req.Input)
	if err != nil {
		return nil, err
	}
	return m.batch(), nil
}

// Get returns the batch id, or batchapi.ErrNotFound.
func (u *Batches) Get(ctx context.Context, id string) (*batchapi.Batch, error) {
	m, err := u.b.GetBatch(ctx, id)
	if err != nil {
		return nil, notFound(err)
	}
	return m.batch(), nil
}

// Find is batchapi.ErrUnsupported: Anthropic's batches carry no metadata.
func (u *Batches) Find(context.Context, map[string]string, time.Duration) (*batchapi.Batch, error) {
	return nil, fmt.Errorf("%w: Anthropic's Message Batches carry no metadata to find them by", batchapi.ErrUnsupported)
}

// List returns the Message Batches created at or after since, newest
// first: without tags, a caller tells its batch by when it was created and
// its request count.
func (u *Batches) List(ctx context.Context, since time.Time) ([]*batchapi.Batch, error) {
	ms, err := u.b.ListBatches(ctx, since)
	if err != nil {
		return nil, err
	}
	out := make([]*batchapi.Batch, len(ms))
	for i, m := range ms {
		out[i] = m.batch()
	}
	return out, nil
}

// Cancel asks Anthropic to cancel the batch id.
func (u *Batches) Cancel(ctx context.Context, id string) (*batchapi.Batch, error) {
	m, err := u.b.CancelBatch(ctx, id)
	if err != nil {
		return nil, notFound(err)
	}
	return m.batch(), nil
}

// Results streams an ended batch's results: succeeded lines as answers
// (Failed when the answer is unusable), errored as Failed, canceled as
// Cancelled and expired as Expired.
func (u *Batches) Results(ctx context.Context, b *batchapi.Batch, fn func(*batchapi.Result) error) error {
	if !b.Status.Terminal() {
		return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, Message: "message batch " + clip(b.ID, 64) + " has not ended"}
	}
	return u.b.BatchResults(ctx, &MessageBatch{ID: b.ID, ProcessingStatus: "ended"}, func(r *BatchResult) error {
		out := &batchapi.Result{CustomID: r.CustomID, Resp: r.Resp}
		switch {
		case r.Type == "canceled":
			out.Outcome = batchapi.Cancelled
		case r.Type == "expired":
			out.Outcome = batchapi.Expired
		case r.Resp.Err != nil:
			out.Outcome = batchapi.Failed
		default:
			out.Outcome = batchapi.Succeeded
		}
		return fn(out)
	})
}

// notFound wraps a 404 in batchapi.ErrNotFound.
func notFound(err error) error {
	if batcher.ClassOf(err) == batcher.ClassNotFound {
		return fmt.Errorf("%w: %w", batchapi.ErrNotFound, err)
	}
	return err
}

// batch maps a Message Batch onto batchapi's view: in_progress is in
// progress, canceling cancelling; an ended batch is cancelled when a
// cancel was asked, expired when every request expired, completed
// otherwise (its lines say how each ended).
func (m *MessageBatch) batch() *batchapi.Batch {
	c := &m.RequestCounts
	total := c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired
	b := &batchapi.Batch{ID: m.ID, CreatedAt: m.CreatedAt, InProgressAt: m.CreatedAt, ExpiresAt: m.ExpiresAt,
		Counts: batchapi.Counts{Total: total, Completed: c.Succeeded, Failed: c.Errored + c.Canceled + c.Expired}}
	switch m.ProcessingStatus {
	case "canceling":
		b.Status = batchapi.StatusCancelling
	case "ended":
		switch {
		case m.CancelInitiatedAt != nil:
			b.Status = batchapi.StatusCancelled
		case total > 0 && c.Expired == total:
			b.Status = batchapi.StatusExpired
		default:
			b.Status = batchapi.StatusCompleted
		}
	default:
		b.Status = batchapi.StatusInProgress
	}
	return b
}
