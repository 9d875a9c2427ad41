package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// TestCacheByDefault: batcherd caches embeddings out of the box; a repeat
// says it was a hit, a bypass goes upstream, and the status page's data
// shows the route's hit ratio.
func TestCacheByDefault(t *testing.T) {
	o := startObserved(t)
	defer o.shutdown(t)
	c, err := client.Dial(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	embed := func(mode batcherv1.CacheMode) *batcherv1.Completion {
		t.Helper()
		res, err := c.Submit(t.Context(), &batcherv1.Request{Model: "embed", Cache: mode,
			Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "the same chunk"}}})
		if err != nil || res.GetError() != nil {
			t.Fatalf("submit: %v %v", err, res.GetError())
		}
		return res
	}
	if embed(0).GetCached() {
		t.Fatal("the first answer came from the cache")
	}
	if !embed(0).GetCached() {
		t.Fatal("a repeat missed the cache")
	}
	if r := embed(batcherv1.CacheMode_CACHE_MODE_BYPASS); r.GetCached() || r.GetBatchSize() == 0 {
		t.Fatal("a bypass was served from the cache")
	}
	ratio := func() float64 {
		resp, err := http.Get("http://" + o.admin + "/api/snapshot")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var snap struct {
			Cache []struct {
				Route    string  `json:"route"`
				HitRatio float64 `json:"hit_ratio"`
			} `json:"cache"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
			t.Fatal(err)
		}
		for _, r := range snap.Cache {
			if r.Route == "embed" {
				return r.HitRatio
			}
		}
		return -1
	}
	// Two lookups, one hit (the bypass looks nothing up); the sampler
	// takes a snapshot every 200ms.
	poll(t, "the status page's hit ratio", func() bool { return ratio() == 0.5 })
}
