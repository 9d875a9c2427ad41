package batcher

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sharingBackend is a fakeBackend that says which parameters its batches
// share (ParamSharer) and records what each dispatch carried.
type sharingBackend struct {
	fakeBackend
	shared ParamSet

	mu        sync.Mutex
	params    map[string]Params // each request's Params as dispatched, by id
	maxTokens []int32           // each batch's MaxTokens
}

func (f *sharingBackend) SharedParams(_, _ string, _ Operation) ParamSet { return f.shared }

func (f *sharingBackend) Dispatch(ctx context.Context, b *Batch, out []Response) error {
	f.mu.Lock()
	if f.params == nil {
		f.params = map[string]Params{}
	}
	for _, r := range b.Requests {
		f.params[r.ID] = r.Params
	}
	f.maxTokens = append(f.maxTokens, b.MaxTokens)
	f.mu.Unlock()
	return f.fakeBackend.Dispatch(ctx, b, out)
}

// variedParams are six requests that differ in every generation parameter;
// the first three have seed 1, the others seed 2.
func variedParams() []*Request {
	ps := []Params{
		{MaxTokens: 10, Seed: ptr(int64(1))},
		{MaxTokens: 20, Temperature: ptr(float32(0.3)), Seed: ptr(int64(1))},
		{TopP: ptr(float32(0.9)), Seed: ptr(int64(1)), Stop: []string{"x"}},
		{Temperature: ptr(float32(0.7)), Seed: ptr(int64(2))},
		{Seed: ptr(int64(2)), Stop: []string{"y", "z"}},
		{MaxTokens: 30, Seed: ptr(int64(2))},
	}
	reqs := make([]*Request, len(ps))
	for i, p := range ps {
		reqs[i] = req(string(rune('a'+i)), PriorityNormal)
		reqs[i].Params = p
	}
	return reqs
}

// A backend that sends requests one by one shares no parameter: requests
// that differ only in their parameters share a lane and a batch, and each
// reaches the backend with its own. One that shares only the seed splits
// lanes by seed alone; one that says nothing splits on every parameter, as
// before.
func TestLanesSplitOnlyOnSharedParams(t *testing.T) {
	for _, tt := range []struct {
		name    string
		shared  ParamSet
		lanes   int
		batches []int
	}{
		{"fan-out, nothing shared", 0, 1, []int{6}},
		{"seed shared", ParamSeed, 2, []int{3, 3}},
		{"everything shared", AllParams, 6, []int{1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				be := &sharingBackend{shared: tt.shared}
				b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 6, MinBatchSize: 6, Window: time.Second, MaxWait: time.Second})
				reqs := variedParams()
				calls := make([]*Call, len(reqs))
				for i, r := range reqs {
					calls[i] = submit(t, b, r)
				}
				synctest.Wait()
				if n := len(b.Lanes()); n != tt.lanes {
					t.Fatalf("%d lanes, want %d", n, tt.lanes)
				}
				for _, c := range calls {
					<-c.Done()
					wantOK(t, c)
				}
				got := be.sizes()
				slices.Sort(got)
				if !slices.Equal(got, tt.batches) {
					t.Fatalf("batch sizes %v, want %v", got, tt.batches)
				}
				be.mu.Lock()
				defer be.mu.Unlock()
				for _, r := range reqs {
					p := be.params[r.ID]
					if p.MaxTokens != r.Params.MaxTokens || !eqPtr(p.Temperature, r.Params.Temperature) || !eqPtr(p.TopP, r.Params.TopP) ||
						!eqPtr(p.Seed, r.Params.Seed) || !slices.Equal(p.Stop, r.Params.Stop) {
						t.Errorf("%s dispatched with %+v, want its own %+v", r.ID, p, r.Params)
					}
				}
				if tt.shared == 0 {
					if len(be.maxTokens) != 1 || be.maxTokens[0] != DefaultMaxTokens {
						t.Errorf("batch max_tokens %v, want the route's default %d when max_tokens is not shared", be.maxTokens, DefaultMaxTokens)
					}
				}
			})
		})
	}
}

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// Deduplication still needs every parameter equal: on a fan-out lane, two
// deterministic requests with the same prompt and different seeds are two
// upstream requests; with the same seed, one.
func TestDedupComparesParamsTheLaneIgnores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be := &sharingBackend{shared: 0}
		b := newTest(t, be, 4, BatchConfig{MaxBatchSize: 8, MinBatchSize: 8, Window: time.Second, MaxWait: time.Second})
		mk := func(id string, seed int64) *Request {
			r := req(id, PriorityNormal)
			r.Input.Prompt = "same prompt"
			r.Params = Params{Temperature: ptr(float32(0)), Seed: ptr(seed)}
			return r
		}
		calls := []*Call{submit(t, b, mk("s1", 1)), submit(t, b, mk("s2", 2)), submit(t, b, mk("s1-again", 1))}
		for _, c := range calls {
			<-c.Done()
			wantOK(t, c)
		}
		if got := be.sizes(); !slices.Equal(got, []int{2}) {
			t.Fatalf("batches %v, want one of 2: seeds 1 and 2 apart, the second seed-1 request deduplicated", got)
		}
	})
}
