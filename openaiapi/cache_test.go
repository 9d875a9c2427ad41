package openaiapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/cache"
	"github.com/batcherhq/batcher/openaiapi"
)

// TestCacheControl: a repeat is a hit (and says so), Cache-Control:
// no-cache goes upstream and stores anew, no-store neither looks nor
// stores.
func TestCacheControl(t *testing.T) {
	c, err := cache.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	fake := newFake()
	e := newEnv(t, fake, withCore(batcher.WithCache(c)))
	const body = `{"model":"embed","input":"same text"}`
	for i, tc := range []struct {
		header []string
		hit    bool
		calls  int64
	}{
		{nil, false, 1},
		{nil, true, 1},
		{[]string{"Cache-Control", "no-cache"}, false, 2},
		{[]string{"Cache-Control", "max-age=0, No-Store"}, false, 3},
		{[]string{"Cache-Control", "max-age=60"}, true, 3},
	} {
		code, h, out := e.post(t, "/embeddings", body, tc.header...)
		if code != http.StatusOK {
			t.Fatalf("%d: %d %s", i, code, out)
		}
		if got := h.Get(openaiapi.CacheHeader) == "hit"; got != tc.hit {
			t.Errorf("%d %v: hit %v, want %v", i, tc.header, got, tc.hit)
		}
		if n := fake.requests.Load(); n != tc.calls {
			t.Errorf("%d %v: upstream requests %d, want %d", i, tc.header, n, tc.calls)
		}
	}
}
