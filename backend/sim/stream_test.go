package sim_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

// timedWriter records each delta's text and when it came.
type timedWriter struct {
	mu    sync.Mutex
	texts []string
	at    []time.Time
}

func (w *timedWriter) WriteDelta(d *batcher.Delta) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, d.Text)
	w.at = append(w.at, time.Now())
	return nil
}

// TestStreamPace: a streamed answer is Dispatch's text, one word a delta,
// the first after TimeToFirstToken and the rest at TokensPerSecond.
func TestStreamPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := sim.New(sim.Config{BaseLatency: time.Second, TimeToFirstToken: 200 * time.Millisecond, TokensPerSecond: 50})
		if err != nil {
			t.Fatal(err)
		}
		r := &batcher.Request{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "hello streaming world"}}}}
		b := &batcher.Batch{Model: "m", Op: batcher.OpChat, MaxTokens: 64, Requests: []*batcher.Request{r}}
		out := make([]batcher.Response, 1)
		if err := p.Dispatch(context.Background(), b, out); err != nil {
			t.Fatal(err)
		}
		var w timedWriter
		start := time.Now()
		resp, err := p.Stream(context.Background(), b, &w)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(w.texts, ""); got != out[0].Text || len(w.texts) != int(resp.Usage.CompletionTokens) {
			t.Fatalf("deltas %q (%d), want %q in %d", got, len(w.texts), out[0].Text, resp.Usage.CompletionTokens)
		}
		if ttft := w.at[0].Sub(start); ttft != 200*time.Millisecond {
			t.Errorf("first delta after %v, want 200ms", ttft)
		}
		if gap := w.at[2].Sub(w.at[1]); gap != 20*time.Millisecond {
			t.Errorf("deltas %v apart, want 20ms (50 tokens/s)", gap)
		}
	})
}

// TestStreamCancel: a cancelled stream stops at once.
func TestStreamCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := sim.New(sim.Config{TimeToFirstToken: time.Millisecond, TokensPerSecond: 1})
		r := &batcher.Request{Input: batcher.Input{Op: batcher.OpCompletion, Prompt: "a b c d"}}
		b := &batcher.Batch{Model: "m", Op: batcher.OpCompletion, MaxTokens: 64, Requests: []*batcher.Request{r}}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(1500*time.Millisecond, cancel)
		var w timedWriter
		start := time.Now()
		if _, err := p.Stream(ctx, b, &w); err == nil {
			t.Fatal("no error from a cancelled stream")
		}
		if len(w.texts) != 2 || time.Since(start) != 1500*time.Millisecond {
			t.Fatalf("%d deltas over %v, want 2 over 1.5s", len(w.texts), time.Since(start))
		}
	})
}

func TestStreamConfigRefused(t *testing.T) {
	for _, c := range []sim.Config{{TimeToFirstToken: -1}, {TokensPerSecond: -1}} {
		if _, err := sim.New(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestStreamToolCalls: a streamed answer that calls a tool streams the
// call (its id and name, then its arguments), the same call Dispatch
// gives, so a streamed caller has the call its finish reason announces.
func TestStreamToolCalls(t *testing.T) {
	p, err := sim.New(sim.Config{TimeToFirstToken: time.Millisecond, TokensPerSecond: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	r := &batcher.Request{Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: "use get_weather"}}},
		Chat: &batcher.ChatOptions{Tools: []batcher.Tool{weather}, ToolChoice: batcher.ToolChoice{Mode: batcher.ToolChoiceFunction, Function: "get_weather"}}}
	b := &batcher.Batch{Model: "m", Op: batcher.OpChat, MaxTokens: 64, Requests: []*batcher.Request{r}}
	out := make([]batcher.Response, 1)
	if err := p.Dispatch(context.Background(), b, out); err != nil {
		t.Fatal(err)
	}
	if len(out[0].ChatOutput().ToolCalls) != 1 {
		t.Fatalf("Dispatch gave %+v, want one tool call", out[0])
	}
	var got []batcher.ToolCall
	w := deltaFunc(func(d *batcher.Delta) error {
		for _, c := range d.ToolCalls {
			for int(c.Index) >= len(got) {
				got = append(got, batcher.ToolCall{})
			}
			g := &got[c.Index]
			g.ID += c.ID
			g.Name += c.Name
			g.Arguments += c.Arguments
		}
		return nil
	})
	resp, err := p.Stream(context.Background(), b, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != out[0].ChatOutput().ToolCalls[0] || len(resp.ChatOutput().ToolCalls) != 1 || resp.ChatOutput().ToolCalls[0] != got[0] {
		t.Fatalf("streamed calls %+v (answer's %+v), want %+v", got, resp.ChatOutput().ToolCalls, out[0].ChatOutput().ToolCalls)
	}
}

type deltaFunc func(*batcher.Delta) error

func (f deltaFunc) WriteDelta(d *batcher.Delta) error { return f(d) }
