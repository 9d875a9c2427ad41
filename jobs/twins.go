package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/batcherhq/batcher/backend/batchapi"
)

// A create call a kill (or a timeout) cut off may still be in flight at
// the provider: the batch it makes appears later. Chunk.CreateStarted,
// recorded before the call, bounds when: the call gives up at
// CreateStarted + BatchRoute.CreateTimeout. A resumed chunk that finds no
// batch of its own (findCreated) waits until then, looking again meanwhile,
// before it creates one (waitInFlight). A batch that still lands later (the
// provider finished a create its client had abandoned) is a twin: on a
// provider with tags, the chunk cancels every batch with its tags other
// than the one it recorded, and never reads their output (cancelTwins).

// DefaultBatchCreateTimeout bounds one create call (BatchRoute.CreateTimeout).
const DefaultBatchCreateTimeout = 10 * time.Minute

// createClockAllowance is how far the provider's clock (a batch's
// CreatedAt) may lag ours (CreateStarted): batches created up to this long
// before a recorded start are taken as the chunk's too.
const createClockAllowance = 5 * time.Second

// chunkTags are the metadata a chunk's batch is created with.
func (u *upstream) chunkTags(c *Chunk) map[string]string {
	return map[string]string{"batcher_job_id": u.r.id, "batcher_chunk": strconv.Itoa(c.Chunk)}
}

// waitInFlight waits, for a chunk whose create call an earlier try began
// and which finds no batch of its own, until that call can no longer be
// in flight (CreateStarted + CreateTimeout), looking again for the batch
// it may still make meanwhile, at PollMin and backing off to PollMax: the
// chunk takes that batch as soon as it lands, not at the bound.
func (u *upstream) waitInFlight(ctx context.Context, c *Chunk, held []Task) error {
	if c.CreateStarted.IsZero() {
		return nil
	}
	until := c.CreateStarted.Add(u.br.CreateTimeout)
	delay := u.br.PollMin
	for time.Now().Before(until) {
		u.createMu.Lock()
		b, err := u.findCreated(ctx, c, held)
		u.createMu.Unlock()
		if err != nil || b != nil {
			return err
		}
		t := time.NewTimer(min(delay, time.Until(until)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, u.br.PollMax)
	}
	return nil
}

// findCreated returns the batch an earlier try created for c, or nil. On
// a provider with tags it is the newest batch with c's tags (Find). Without
// tags (Anthropic's Message Batches), and only once a create call began
// (CreateStarted), it is the oldest batch that
//   - was created at or after CreateStarted (less createClockAllowance),
//   - and before the create of any later chunk of the job began (the
//     job's creates take turns, createMu, so no other of its calls was in
//     flight then),
//   - and not while the create of another chunk that recorded no batch
//     was the job's latest (between that create's start and the next
//     one's): the allowance reaches back over the create before the
//     chunk's, and a batch made then is that chunk's (ownedByOther),
//   - holds as many requests as the chunk,
//   - and is recorded by no chunk of the store.
//
// That match is a guess where another client of the same account (another
// job, another process, another program) creates a batch of the same size
// in the same moments, or where the two clocks differ by more than the
// allowance: it may then take a batch that is not the chunk's (whose lines
// then come back as missing, and go again) and leave its own unrecorded.
// The caller holds createMu.
func (u *upstream) findCreated(ctx context.Context, c *Chunk, held []Task) (*batchapi.Batch, error) {
	up := u.br.Upstream
	if u.lim.Tagged {
		b, err := up.Find(ctx, u.chunkTags(c), u.lim.Window+time.Hour)
		if errors.Is(err, batchapi.ErrNotFound) {
			return nil, nil
		}
		return b, err
	}
	if c.CreateStarted.IsZero() {
		return nil, nil
	}
	chunks, err := u.cs.Chunks(ctx, u.r.id)
	if err != nil {
		return nil, err
	}
	var before time.Time // the next start of another chunk's create
	for i := range chunks {
		s := chunks[i].CreateStarted
		if chunks[i].Chunk != c.Chunk && s.After(c.CreateStarted) && (before.IsZero() || s.Before(before)) {
			before = s
		}
	}
	bs, err := up.List(ctx, c.CreateStarted.Add(-createClockAllowance))
	if err != nil {
		return nil, err
	}
	for i := len(bs) - 1; i >= 0; i-- { // oldest first
		b := bs[i]
		if b.CreatedAt.Before(c.CreateStarted.Add(-createClockAllowance)) || (!before.IsZero() && !b.CreatedAt.Before(before)) {
			continue
		}
		if b.Counts.Total != int64(len(held)) && b.Counts.Total != int64(len(c.Seqs)) {
			continue
		}
		if b.CreatedAt.Before(c.CreateStarted) && ownedByOther(chunks, c.Chunk, b.CreatedAt) {
			continue
		}
		taken, err := u.cs.BatchRecorded(ctx, b.ID)
		if err != nil {
			return nil, err
		}
		if !taken {
			return b, nil
		}
	}
	return nil, nil
}

// ownedByOther reports whether at, a moment before c's create began, falls
// in the create window of another chunk that recorded no batch: the
// latest create start of a chunk other than c at or before at is that
// chunk's, and nothing began between. Without it two resumed chunks
// whose creates a kill cut off could both take the first one's batch
// within createClockAllowance, whichever resumed first, and the other
// would create its batch again.
func ownedByOther(chunks []Chunk, c int, at time.Time) bool {
	var latest *Chunk
	for i := range chunks {
		s := chunks[i].CreateStarted
		if s.IsZero() || s.After(at) || (latest != nil && !s.After(latest.CreateStarted)) {
			continue
		}
		latest = &chunks[i]
	}
	return latest != nil && latest.Chunk != c && latest.BatchID == ""
}

// cancelTwins cancels, on a provider with tags, the batches with c's tags
// other than the one c recorded: a create cut off in flight that the
// provider finished after a later try had created the chunk's batch. Their
// output is never read. It runs once the id of a batch created after an
// earlier try is recorded, and when the chunk's batch has ended (a twin
// may land late). Failures are logged: the chunk goes on.
func (u *upstream) cancelTwins(ctx context.Context, c *Chunk) {
	if !u.lim.Tagged || c.CreateStarted.IsZero() {
		return
	}
	bs, err := u.br.Upstream.List(ctx, c.CreateStarted.Add(-createClockAllowance))
	if err != nil {
		u.r.logErr(fmt.Sprintf("upstream batch %d: looking for twins", c.Chunk), err)
		return
	}
	tags := u.chunkTags(c)
	for _, b := range bs {
		if b.ID == c.BatchID || !holdsTags(b.Metadata, tags) || b.Status == batchapi.StatusCancelling || b.Status == batchapi.StatusCancelled {
			continue // not a twin, or cancelled already
		}
		u.r.m.twins.add(u.route)
		if b.Status.Terminal() {
			u.r.logErr(fmt.Sprintf("upstream batch %d: %s is a twin of %s (created twice); it has ended, its output is not read", c.Chunk, b.ID, c.BatchID), errTwin)
			continue
		}
		if _, err := u.br.Upstream.Cancel(ctx, b.ID); err != nil {
			u.r.logErr(fmt.Sprintf("upstream batch %d: cancelling %s, a twin of %s", c.Chunk, b.ID, c.BatchID), err)
			continue
		}
		u.r.logErr(fmt.Sprintf("upstream batch %d: %s is a twin of %s (created twice); cancelled, its output is not read", c.Chunk, b.ID, c.BatchID), errTwin)
	}
}

var errTwin = errors.New("jobs: an upstream batch was created twice")

func holdsTags(m, tags map[string]string) bool {
	for k, v := range tags {
		if got, ok := m[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// twinMetric is batcher_upstream_twins_total: upstream batches found
// created twice for one chunk (and cancelled), by route.
type twinMetric struct {
	ctr metric.Int64Counter
}

func newTwinMetric(mp metric.MeterProvider) (*twinMetric, error) {
	if mp == nil {
		return nil, nil
	}
	ctr, err := mp.Meter(meterName).Int64Counter("batcher.upstream_twins", metric.WithUnit("{batch}"),
		metric.WithDescription("Upstream batches found created twice for one chunk of a job (a create call cut off in flight that the provider finished), cancelled unread, by route."))
	if err != nil {
		return nil, err
	}
	return &twinMetric{ctr: ctr}, nil
}

func (t *twinMetric) add(route string) {
	if t == nil {
		return
	}
	t.ctr.Add(context.Background(), 1, metric.WithAttributes(keyRoute.String(route)))
}
