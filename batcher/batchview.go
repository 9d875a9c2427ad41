package batcher

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// What a caller sees of its batch.
//
// A Result's BatchID and BatchSize, and the BatchID and BatchSize of its
// EventBatched and EventDispatched, are the caller's view of the batch that
// carried the request. A request with a Tenant sees only its own tenant's
// share: BatchSize counts the batch's requests of the same Tenant, and
// BatchID is the tenant's own name for the batch, "t" and 16 hex digits of
// a keyed hash of the batch and the tenant. The key is random per Batcher,
// so the name is the same for all of one tenant's requests in one batch,
// differs between tenants, and tells nothing of the batch sequence (how
// many batches the process made) or of the other tenants riding with it.
// A request without a Tenant (no tenants configured, or work the process
// makes itself) sees the batch whole: its internal id and size. Traces and
// metrics, which belong to the operator, carry the internal id.

// batchView is one caller's view of its batch.
type batchView struct {
	id   string
	size int
}

// newViewKey returns a random key for tenantBatchID.
func newViewKey() (k [16]byte) {
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// tenantBatchID is the name tenant sees for the batch whose internal id is
// id. The hash is over the key, then id, a NUL (which no internal id holds)
// and tenant: neither part can shift into the other.
func (b *Batcher) tenantBatchID(id, tenant string) string {
	h := sha256.New()
	h.Write(b.viewKey[:])
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	var sum [sha256.Size]byte
	var out [17]byte
	out[0] = 't'
	hex.Encode(out[1:], h.Sum(sum[:0])[:8])
	return string(out[:])
}

// setViews makes the run's views of its batch, which viewOf hands out. A
// batch of one tenant (the usual case) costs one hash; the per-tenant
// counts are made only when the batch holds more than one tenant. A batch
// without tenants (no request names one) reads no request: each Request
// is cold in the cache by now, so the tenants are looked at only when a
// call says it has one (Call.named). The views are the run's, not the
// calls': a call read its view only while the run that set it carries it.
func (r *batchRun) setViews() {
	live := r.live
	r.view = batchView{id: r.batch.ID, size: len(live)}
	r.mixed = false
	named := false
	for _, c := range live {
		if c.named {
			named = true
			break
		}
	}
	if !named {
		return
	}
	first := live[0].req.Tenant
	for _, c := range live[1:] {
		if c.req.Tenant != first {
			r.mixed = true
			break
		}
	}
	if !r.mixed {
		if first != "" {
			r.view.id = r.b.tenantBatchID(r.batch.ID, first)
		}
		return
	}
	if r.tenantIdx == nil {
		r.tenantIdx = make(map[string]int)
	}
	clear(r.tenantIdx)
	r.views = r.views[:0]
	for _, c := range live {
		t := c.req.Tenant
		if t == "" {
			continue
		}
		i, ok := r.tenantIdx[t]
		if !ok {
			i = len(r.views)
			r.tenantIdx[t] = i
			r.views = append(r.views, batchView{id: r.b.tenantBatchID(r.batch.ID, t)})
		}
		r.views[i].size++
	}
}

// viewOf returns c's view of the run's batch, one of the run's live calls
// since setViews.
func (r *batchRun) viewOf(c *Call) batchView {
	if r.mixed && c.named {
		return r.views[r.tenantIdx[c.req.Tenant]]
	}
	return r.view
}
