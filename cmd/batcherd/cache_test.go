package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
	defer func() { _ = c.Close() }()
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
		defer func() { _ = resp.Body.Close() }()
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

// TestCacheForgetsRemovedRoutes: a reload that removes a route leaves
// nothing of it in the response cache: its memory budget and answers go,
// and so do its metrics series (and its counts, which the status page
// shows); the route
// that stays keeps its answers.
func TestCacheForgetsRemovedRoutes(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "batcherd.yaml")
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(cfgFile+".tmp", []byte("security: {reload_interval: 20ms}\n"+data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfgFile+".tmp", cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	const backends = "backends: [{name: up, type: sim, sim: {base_latency: 1ms}}]\n"
	write(backends + `routes:
  - {name: kept, operation: embedding, backend: up, cache: {max_bytes: 1048576}}
  - {name: gone, operation: embedding, backend: up, cache: {max_bytes: 1048576}}
`)
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", cfgFile)
	admin := adminAddr(t, &daemon{logs: logs})
	c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	embed := func(route string) *batcherv1.Completion {
		t.Helper()
		res, err := c.Submit(t.Context(), client.Embed(route, "the same chunk"))
		if err != nil || res.GetError() != nil {
			t.Fatalf("%s: %v %v", route, err, res.GetError())
		}
		return res
	}
	embed("kept")
	embed("gone")
	cacheRoutes := func() map[string]bool {
		fams := scrape(t, admin)
		out := map[string]bool{}
		for name, f := range fams {
			if strings.HasPrefix(name, "batcher_cache_") {
				for r := range f.labels["batcher_route"] {
					out[r] = true
				}
			}
		}
		return out
	}
	if got := cacheRoutes(); !got["kept"] || !got["gone"] {
		t.Fatalf("cache series for %v before the reload", got)
	}

	write(backends + "routes: [{name: kept, operation: embedding, backend: up, cache: {max_bytes: 1048576}}]\n")
	waitLog(t, logs, `"msg":"configuration reloaded"`)

	if got := cacheRoutes(); !reflect.DeepEqual(got, map[string]bool{"kept": true}) {
		t.Fatalf("cache series for %v after the reload removed gone", got)
	}
	if !embed("kept").GetCached() {
		t.Fatal("the route that stayed lost its answer")
	}
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d\n%s", code, logs)
	}
}
