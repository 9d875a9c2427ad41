package openai

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// TestPackPauseEnds: PauseAfter failed packs in a row pause a route's
// packing for PauseFor; an answered pack ends a run of failures; the pause
// ends on time, and both ends are logged.
func TestPackPauseEnds(t *testing.T) {
	var logs bytes.Buffer
	b, err := New(Config{BaseURL: "http://127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Pack: PackConfig{Enabled: true, PauseAfter: 2, PauseFor: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	ctx := context.Background()
	boom := errors.New("boom")

	b.packFailed(ctx, "r", 3, boom)
	b.packAnswered("r") // the run ends
	b.packFailed(ctx, "r", 3, boom)
	if !b.packing(ctx, "r") || b.UpstreamCalls("r", batcher.OpChat, 4) != 1 {
		t.Fatal("paused after failures that were not in a row")
	}
	b.packFailed(ctx, "r", 3, boom)
	if b.packing(ctx, "r") || !b.packPaused("r") || b.Stats().PackPausedRoutes != 1 {
		t.Fatal("not paused after 2 failed packs in a row")
	}
	if !strings.Contains(logs.String(), "route stops packing") || !strings.Contains(logs.String(), "pause=1m0s") {
		t.Fatalf("pause not logged: %s", logs.String())
	}
	if !b.packing(ctx, "other") {
		t.Fatal("another route paused too")
	}
	now = now.Add(time.Minute)
	if !b.packing(ctx, "r") || b.Stats().PackPausedRoutes != 0 || b.Stats().PackPauses != 1 {
		t.Fatalf("still paused after PauseFor: %+v", b.Stats())
	}
	if !strings.Contains(logs.String(), "route packs again") {
		t.Fatalf("resumption not logged: %s", logs.String())
	}
}

// TestRichRequestsNeverPack: a request with tools, a response format, an
// image or a parameter beyond the plain five goes as its own call.
func TestRichRequestsNeverPack(t *testing.T) {
	plain := func() *batcher.Request {
		return &batcher.Request{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "hi"}}}}
	}
	if _, _, ok := packable(plain()); !ok {
		t.Fatal("a plain request does not pack")
	}
	for name, edit := range map[string]func(r *batcher.Request){
		"tools":  func(r *batcher.Request) { r.MutableChat().Tools = []batcher.Tool{{Name: "f"}} },
		"format": func(r *batcher.Request) { r.MutableChat().ResponseFormat.Type = batcher.FormatJSONObject },
		"image": func(r *batcher.Request) {
			r.Input.Messages[0] = batcher.Message{Role: "user", Parts: []batcher.ContentPart{{Kind: batcher.PartImage, ImageURL: "https://x"}}}
		},
		"logprobs": func(r *batcher.Request) { r.Params.MutableRich().Logprobs = true },
		"extra":    func(r *batcher.Request) { r.MutableChat().Extra = []byte(`{"a":1}`) },
	} {
		r := plain()
		edit(r)
		if _, _, ok := packable(r); ok {
			t.Errorf("%s: packable", name)
		}
	}
}
