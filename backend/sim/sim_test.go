package sim_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newProvider(t *testing.T, cfg sim.Config) *sim.Provider {
	t.Helper()
	p, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	return p
}

func prompt(s string) batcher.Input { return batcher.Input{Op: batcher.OpCompletion, Prompt: s} }
func text(s string) batcher.Input   { return batcher.Input{Op: batcher.OpEmbedding, Text: s} }
func chat(s string) batcher.Input {
	return batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: s}}}
}

func upstream(t *testing.T, err error) *batcher.UpstreamError {
	t.Helper()
	var ue *batcher.UpstreamError
	if !errors.As(err, &ue) {
		t.Fatalf("error %v (%T) is not an *UpstreamError", err, err)
	}
	return ue
}

func ptr[T any](v T) *T { return &v }

func TestOutputDeterministic(t *testing.T) {
	ctx := t.Context()
	a, b := newProvider(t, sim.Config{}), newProvider(t, sim.Config{Seed: 99})
	for _, in := range []batcher.Input{prompt("tell me about batching"), chat("hello there"), text("embed me")} {
		ra, err := a.Call(ctx, "m", in, batcher.Params{})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Call(ctx, "m", in, batcher.Params{})
		if err != nil {
			t.Fatal(err)
		}
		if ra.Text != rb.Text || !equalVec(ra.Embedding, rb.Embedding) || ra.Usage != rb.Usage || ra.FinishReason != rb.FinishReason {
			t.Errorf("%v: two providers disagree: %+v vs %+v", in.Op, ra, rb)
		}
		if in.Op == batcher.OpEmbedding {
			if ra.Text != "" || len(ra.Embedding) != sim.DefaultDimensions {
				t.Errorf("embedding: got text %q and %d dimensions, want %d", ra.Text, len(ra.Embedding), sim.DefaultDimensions)
			}
		} else if ra.Text == "" || ra.Embedding != nil {
			t.Errorf("%v: got text %q and embedding %v", in.Op, ra.Text, ra.Embedding)
		}
		if want := int32(in.Size()/4 + 1); ra.Usage.PromptTokens != want {
			t.Errorf("%v: prompt tokens %d, want %d", in.Op, ra.Usage.PromptTokens, want)
		}
	}
}

func TestOutputDependsOnInputAndParams(t *testing.T) {
	ctx := t.Context()
	p := newProvider(t, sim.Config{})
	get := func(model string, in batcher.Input, params batcher.Params) batcher.Response {
		r, err := p.Call(ctx, model, in, params)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := get("m", prompt("one two three"), batcher.Params{})
	if !strings.HasPrefix(base.Text, "one two three ") {
		t.Errorf("text %q does not echo its prompt", base.Text)
	}
	for name, r := range map[string]batcher.Response{
		"prompt":      get("m", prompt("one two four"), batcher.Params{}),
		"model":       get("other", prompt("one two three"), batcher.Params{}),
		"temperature": get("m", prompt("one two three"), batcher.Params{Temperature: ptr[float32](0.5)}),
		"seed":        get("m", prompt("one two three"), batcher.Params{Seed: ptr[int64](7)}),
	} {
		if r.Text == base.Text {
			t.Errorf("changing the %s left the text %q unchanged", name, r.Text)
		}
	}
	e1, e2 := get("m", text("a"), batcher.Params{}), get("m", text("b"), batcher.Params{})
	if equalVec(e1.Embedding, e2.Embedding) {
		t.Error("different texts embed the same")
	}
	for _, e := range [][]float32{e1.Embedding, e2.Embedding} {
		var sum float64
		for _, f := range e {
			sum += float64(f) * float64(f)
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("embedding norm² %v, want 1", sum)
		}
	}
}

func TestMaxTokensAndStop(t *testing.T) {
	ctx := t.Context()
	p := newProvider(t, sim.Config{})
	in := prompt("alpha beta gamma delta")
	full, err := p.Call(ctx, "m", in, batcher.Params{MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if full.FinishReason != batcher.FinishStop {
		t.Errorf("finish %v, want stop", full.FinishReason)
	}
	if got := int32(len(strings.Fields(full.Text))); got != full.Usage.CompletionTokens {
		t.Errorf("%d words, %d completion tokens", got, full.Usage.CompletionTokens)
	}
	cut, err := p.Call(ctx, "m", in, batcher.Params{MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if cut.Text != "alpha beta gamma" || cut.Usage.CompletionTokens != 3 || cut.FinishReason != batcher.FinishLength {
		t.Errorf("max_tokens 3: got %q, %d tokens, %v; want the first 3 words, length", cut.Text, cut.Usage.CompletionTokens, cut.FinishReason)
	}
	stopped, err := p.Call(ctx, "m", in, batcher.Params{MaxTokens: 3, Stop: []string{"zzz", " gam"}})
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Text != "alpha beta" || stopped.Usage.CompletionTokens != 2 || stopped.FinishReason != batcher.FinishStop {
		t.Errorf("stop: got %q, %d tokens, %v; want \"alpha beta\", 2, stop", stopped.Text, stopped.Usage.CompletionTokens, stopped.FinishReason)
	}
}

func TestModelDimensions(t *testing.T) {
	p := newProvider(t, sim.Config{Dimensions: 8, Models: map[string]sim.Model{"big": {Dimensions: 64}}})
	for model, want := range map[string]int{"big": 64, "small": 8} {
		r, err := p.Call(t.Context(), model, text("x"), batcher.Params{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Embedding) != want {
			t.Errorf("model %s: %d dimensions, want %d", model, len(r.Embedding), want)
		}
	}
}

func TestLatencyModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{BaseLatency: 100 * time.Millisecond, PerToken: 10 * time.Millisecond})
		timed := func(f func()) time.Duration {
			start := time.Now()
			f()
			return time.Since(start)
		}
		var r batcher.Response
		if d := timed(func() { r, _ = p.Call(t.Context(), "m", prompt("x y"), batcher.Params{MaxTokens: 5}) }); d != 150*time.Millisecond || r.Usage.CompletionTokens != 5 {
			t.Errorf("5 tokens took %v (%d tokens), want 150ms", d, r.Usage.CompletionTokens)
		}
		if d := timed(func() { _, _ = p.Call(t.Context(), "m", text("x y"), batcher.Params{}) }); d != 100*time.Millisecond {
			t.Errorf("an embedding took %v, want the base latency 100ms", d)
		}
		// A native batch is one call: the longest output sets its latency.
		b := &batcher.Batch{Model: "m", Op: batcher.OpCompletion, Requests: []*batcher.Request{
			{Input: prompt("a"), Params: batcher.Params{MaxTokens: 2}},
			{Input: prompt("b"), Params: batcher.Params{MaxTokens: 4}},
			{Input: prompt("c"), Params: batcher.Params{MaxTokens: 3}},
		}}
		out := make([]batcher.Response, 3)
		if n := p.UpstreamCalls(b.Route, b.Op, 3); n != 1 {
			t.Errorf("a native batch makes %d upstream calls, want 1", n)
		}
		if d := timed(func() {
			if err := p.Dispatch(t.Context(), b, out); err != nil {
				t.Fatal(err)
			}
		}); d != 140*time.Millisecond {
			t.Errorf("a native batch took %v, want 100ms + 4 tokens = 140ms", d)
		}
		for i, want := range []int32{2, 4, 3} {
			if out[i].Usage.CompletionTokens != want || out[i].Err != nil {
				t.Errorf("out[%d]: %d tokens, err %v; want %d", i, out[i].Usage.CompletionTokens, out[i].Err, want)
			}
		}
		if s := p.Stats(); s.Calls != 3 || s.Items != 5 || s.Succeeded != 3 {
			t.Errorf("stats %+v: want 3 calls, 5 items, 3 succeeded", s)
		}
	})
}

func TestBatchMaxTokensWins(t *testing.T) {
	p := newProvider(t, sim.Config{})
	b := &batcher.Batch{Model: "m", Op: batcher.OpChat, MaxTokens: 2, Requests: []*batcher.Request{{Input: chat("a b c d e")}}}
	out := make([]batcher.Response, 1)
	if err := p.Dispatch(t.Context(), b, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Text != "a b" || out[0].FinishReason != batcher.FinishLength {
		t.Errorf("got %q %v, want \"a b\" cut by the batch's max_tokens", out[0].Text, out[0].FinishReason)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{BaseLatency: time.Second, MaxConcurrency: 3})
		const n = 10
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = p.Call(t.Context(), "m", text("x"), batcher.Params{}) })
		}
		synctest.Wait() // every call is either sleeping out its latency or answered
		if s := p.Stats(); s.InFlight != 3 || s.RateLimited != n-3 {
			t.Errorf("mid-flight stats %+v: want 3 in flight, %d rate limited", s, n-3)
		}
		wg.Wait()
		limited := 0
		for _, err := range errs {
			if err == nil {
				continue
			}
			limited++
			ue := upstream(t, err)
			if ue.Class != batcher.ClassRateLimit || ue.StatusCode != http.StatusTooManyRequests || ue.RateLimit == nil || ue.RateLimit.RetryAfter != time.Second {
				t.Errorf("got %+v (rate limit %+v), want a 429 rate-limit error retrying after 1s", ue, ue.RateLimit)
			}
		}
		if limited != n-3 {
			t.Errorf("%d calls limited, want %d", limited, n-3)
		}
		if s := p.Stats(); s.MaxConcurrent != 3 || s.InFlight != 0 || s.Succeeded != 3 {
			t.Errorf("stats %+v: want max concurrency 3, none in flight, 3 succeeded", s)
		}
	})
}

func TestConcurrencyLimitConcurrentSafe(t *testing.T) {
	p := newProvider(t, sim.Config{MaxConcurrency: 4, BaseLatency: time.Microsecond})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 200 {
				_, _ = p.Call(t.Context(), "m", text("x"), batcher.Params{})
			}
		})
	}
	wg.Wait()
	if s := p.Stats(); s.MaxConcurrent > 4 || s.Succeeded+s.RateLimited != 16*200 {
		t.Errorf("stats %+v: want max concurrency at most 4 and every call answered", s)
	}
}

func TestFanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{FanOut: true, MaxConcurrency: 2, BaseLatency: 50 * time.Millisecond})
		b := &batcher.Batch{Model: "m", Op: batcher.OpEmbedding}
		for _, s := range []string{"a", "b", "c", "d", "e"} {
			b.Requests = append(b.Requests, &batcher.Request{Input: text(s)})
		}
		out := make([]batcher.Response, len(b.Requests))
		start := time.Now()
		if err := p.Dispatch(t.Context(), b, out); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("fan-out took %v, want the one latency of its concurrent sub-calls, 50ms", d)
		}
		ok, limited := 0, 0
		for i := range out {
			switch {
			case out[i].Err == nil && len(out[i].Embedding) > 0:
				ok++
			case batcher.ClassOf(out[i].Err) == batcher.ClassRateLimit:
				limited++
			default:
				t.Errorf("out[%d] = %+v", i, out[i])
			}
		}
		if ok != 2 || limited != 3 {
			t.Errorf("%d answered and %d limited, want 2 and 3", ok, limited)
		}
		if s := p.Stats(); s.Calls != 5 || p.UpstreamCalls(b.Route, b.Op, 5) != 5 {
			t.Errorf("%d calls, want one per input", s.Calls)
		}
		if b.RateLimit != nil {
			t.Errorf("no RPM or TPM set, yet the batch reports limits %+v", b.RateLimit)
		}
	})
}

func TestRPMLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 60 RPM with a burst of 2: two calls at once, then one a second.
		p := newProvider(t, sim.Config{RPM: 60, RPMBurst: 2})
		call := func() error { _, err := p.Call(t.Context(), "m", text("x"), batcher.Params{}); return err }
		for i := range 2 {
			if err := call(); err != nil {
				t.Fatalf("call %d within the burst: %v", i, err)
			}
		}
		err := call()
		ue := upstream(t, err)
		if ue.Class != batcher.ClassRateLimit || ue.StatusCode != http.StatusTooManyRequests || ue.RateLimit == nil {
			t.Fatalf("got %v, want a 429 with rate-limit info", err)
		}
		if rl := ue.RateLimit; rl.RetryAfter != time.Second || rl.RemainingRequests != 0 || rl.RemainingTokens != -1 || rl.ResetRequests != 2*time.Second {
			t.Errorf("rate limit info %+v: want retry after 1s, 0 requests left, tokens not given, reset in 2s", rl)
		}
		time.Sleep(ue.RateLimit.RetryAfter - time.Millisecond) // fake time
		if err := call(); batcher.ClassOf(err) != batcher.ClassRateLimit {
			t.Errorf("a call before the retry-after: %v, want a rate-limit error", err)
		}
		time.Sleep(time.Millisecond)
		if err := call(); err != nil {
			t.Errorf("a call after the retry-after: %v", err)
		}
		if s := p.Stats(); s.RateLimited != 2 || s.Succeeded != 3 {
			t.Errorf("stats %+v: want 2 limited, 3 succeeded", s)
		}
	})
}

func TestRPMDefaultBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{RPM: 600}) // 10 a second
		ok := 0
		for range 20 {
			if _, err := p.Call(t.Context(), "m", text("x"), batcher.Params{}); err == nil {
				ok++
			}
		}
		if ok != 10 {
			t.Errorf("%d of 20 instant calls passed 600 RPM, want one second's allowance, 10", ok)
		}
	})
}

func TestTPMLimitCountsNativeBatchOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{RPM: 60, RPMBurst: 1, TPM: 600})
		// Three 8-byte embeddings: 3 prompt tokens each, 9 tokens, 1 request.
		b := &batcher.Batch{Model: "m", Op: batcher.OpEmbedding, Requests: []*batcher.Request{
			{Input: text("12345678")}, {Input: text("abcdefgh")}, {Input: text("ABCDEFGH")},
		}}
		out := make([]batcher.Response, 3)
		if err := p.Dispatch(t.Context(), b, out); err != nil {
			t.Fatal(err)
		}
		if rl := b.RateLimit; rl == nil || rl.RemainingRequests != 0 || rl.RemainingTokens != 600-9 || rl.RetryAfter != 0 {
			t.Errorf("the batch reports limits %+v, want 0 requests and 591 tokens left", rl)
		}
		_, err := p.Call(t.Context(), "m", text("x"), batcher.Params{})
		ue := upstream(t, err)
		if rl := ue.RateLimit; rl == nil || rl.RemainingRequests != 0 || rl.RemainingTokens != 600-9 {
			t.Errorf("after a batch of 3: %+v, want 0 requests and 591 tokens left", rl)
		}
		// Completions book max_tokens up front: 100 + 1 prompt token.
		time.Sleep(time.Second)
		if _, err := p.Call(t.Context(), "m", prompt("x"), batcher.Params{MaxTokens: 100}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		_, err = p.Call(t.Context(), "m", prompt("x"), batcher.Params{MaxTokens: 550})
		ue = upstream(t, err)
		if ue.Class != batcher.ClassRateLimit || ue.RateLimit.RetryAfter <= 0 || !strings.Contains(ue.Message, "tokens") {
			t.Errorf("551 tokens with 510 left: %v (%+v), want a 429 on tokens", ue, ue.RateLimit)
		}
		_, err = p.Call(t.Context(), "m", prompt("x"), batcher.Params{MaxTokens: 600})
		if ue := upstream(t, err); ue.Class != batcher.ClassInvalidRequest || ue.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("601 tokens with a bucket of 600: %v, want a 413 invalid request", ue)
		}
	})
}

func TestMaxBatchSize(t *testing.T) {
	p := newProvider(t, sim.Config{MaxBatchSize: 2})
	b := &batcher.Batch{Model: "m", Op: batcher.OpEmbedding, Requests: []*batcher.Request{{Input: text("a")}, {Input: text("b")}, {Input: text("c")}}}
	err := p.Dispatch(t.Context(), b, make([]batcher.Response, 3))
	if ue := upstream(t, err); ue.Class != batcher.ClassInvalidRequest || ue.StatusCode != http.StatusBadRequest || !strings.Contains(ue.Message, "max batch size 2") {
		t.Errorf("got %v, want a 400 naming the max batch size", ue)
	}
	b.Requests = b.Requests[:2]
	if err := p.Dispatch(t.Context(), b, make([]batcher.Response, 2)); err != nil {
		t.Errorf("a batch at the limit: %v", err)
	}
}

func TestWrongOperationFailsAlone(t *testing.T) {
	p := newProvider(t, sim.Config{})
	b := &batcher.Batch{Model: "m", Op: batcher.OpEmbedding, Requests: []*batcher.Request{{Input: text("a")}, {Input: prompt("b")}}}
	out := make([]batcher.Response, 2)
	if err := p.Dispatch(t.Context(), b, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || len(out[0].Embedding) == 0 {
		t.Errorf("out[0] = %+v, want an embedding", out[0])
	}
	if batcher.ClassOf(out[1].Err) != batcher.ClassInvalidRequest {
		t.Errorf("out[1].Err = %v, want an invalid-request error", out[1].Err)
	}
}

func TestFailureInjection(t *testing.T) {
	run := func(seed int64) (failed []bool) {
		p := newProvider(t, sim.Config{FailureRate: 0.2, Seed: seed})
		for range 2000 {
			_, err := p.Call(t.Context(), "m", text("x"), batcher.Params{})
			if err != nil {
				if ue := upstream(t, err); ue.Class != batcher.ClassServer || ue.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("got %v, want an injected 503", ue)
				}
			}
			failed = append(failed, err != nil)
		}
		if s := p.Stats(); s.Failures != int64(count(failed)) {
			t.Errorf("stats count %d failures, calls saw %d", s.Failures, count(failed))
		}
		return failed
	}
	a, b, c := run(1), run(1), run(2)
	if n := count(a); n < 330 || n > 470 {
		t.Errorf("%d of 2000 calls failed at a rate of 0.2, want about 400", n)
	}
	if !equalBools(a, b) {
		t.Error("the same seed gave different failures")
	}
	if equalBools(a, c) {
		t.Error("different seeds gave the same failures")
	}
}

func TestPartialFailureInjection(t *testing.T) {
	p := newProvider(t, sim.Config{PartialFailureRate: 0.3, Seed: 3})
	b := &batcher.Batch{Model: "m", Op: batcher.OpCompletion}
	for range 1000 {
		b.Requests = append(b.Requests, &batcher.Request{Input: prompt("p")})
	}
	out := make([]batcher.Response, len(b.Requests))
	if err := p.Dispatch(t.Context(), b, out); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := range out {
		switch {
		case out[i].Err != nil:
			failed++
			if batcher.ClassOf(out[i].Err) != batcher.ClassServer || out[i].Text != "" {
				t.Errorf("out[%d] = %+v, want a server error and no text", i, out[i])
			}
		case out[i].Text == "":
			t.Errorf("out[%d] has neither text nor error", i)
		}
	}
	if failed < 250 || failed > 350 {
		t.Errorf("%d of 1000 inputs failed at a rate of 0.3, want about 300", failed)
	}
	if s := p.Stats(); s.ItemFailures != int64(failed) || s.Succeeded != 1 {
		t.Errorf("stats %+v: want %d item failures in 1 answered call", s, failed)
	}
}

func TestContextEndsCallPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{BaseLatency: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := p.Call(ctx, "m", prompt("x"), batcher.Params{})
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("cancelled call returned after %v, want at once", d)
		}

		ctx, cancel = context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		out := make([]batcher.Response, 1)
		err := p.Dispatch(ctx, &batcher.Batch{Model: "m", Op: batcher.OpCompletion, Requests: []*batcher.Request{{Input: prompt("x")}}}, out)
		if ue := upstream(t, err); ue.Class != batcher.ClassTimeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline: %v, want a timeout wrapping context.DeadlineExceeded", err)
		}
		if r := out[0]; r.Text != "" || r.Embedding != nil || r.Err != nil || r.Usage != (batcher.Usage{}) {
			t.Errorf("a timed-out call wrote %+v", out[0])
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("call with a 3s deadline returned after %v", d)
		}
		if s := p.Stats(); s.Canceled != 2 || s.InFlight != 0 {
			t.Errorf("stats %+v: want 2 cancelled, none in flight", s)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  sim.Config
		want string
	}{
		{sim.Config{BaseLatency: -1}, "base_latency: must not be negative, got -1ns"},
		{sim.Config{PerToken: -time.Second}, "per_token: must not be negative"},
		{sim.Config{MaxConcurrency: -1}, "max_concurrency: must not be negative, got -1"},
		{sim.Config{RPM: -5}, "rpm: must not be negative"},
		{sim.Config{TPM: -5}, "tpm: must not be negative"},
		{sim.Config{RPMBurst: -5}, "rpm_burst: must not be negative"},
		{sim.Config{TPMBurst: -5}, "tpm_burst: must not be negative"},
		{sim.Config{MaxBatchSize: -2}, "max_batch_size: must not be negative"},
		{sim.Config{FailureRate: 1.5}, "failure_rate: must be 0 to 1, got 1.5"},
		{sim.Config{FailureRate: math.NaN()}, "failure_rate: must be 0 to 1, got NaN"},
		{sim.Config{PartialFailureRate: -0.1}, "partial_failure_rate: must be 0 to 1"},
		{sim.Config{Dimensions: 5000}, "dimensions: must be 1 to 4096, got 5000"},
		{sim.Config{Models: map[string]sim.Model{"e": {Dimensions: -1}}}, `models["e"].dimensions: must be 1 to 4096, got -1`},
		{sim.Config{Models: map[string]sim.Model{"": {}}}, "models: a model name must not be empty"},
	} {
		_, err := sim.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	err := (&sim.Config{RPM: -1, FailureRate: 2}).Validate()
	if err == nil || !strings.Contains(err.Error(), "rpm") || !strings.Contains(err.Error(), "failure_rate") {
		t.Errorf("Validate = %v, want both bad fields named", err)
	}
}

// TestWithBatcher runs the provider behind the core, end to end.
func TestWithBatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, sim.Config{BaseLatency: 200 * time.Millisecond, MaxConcurrency: 2, MaxBatchSize: 5})
		b, err := batcher.New(
			batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p, MaxConcurrency: 2}),
			batcher.WithRoute(batcher.Route{Name: "embed", Op: batcher.OpEmbedding, Backend: "sim", Batch: batcher.BatchConfig{MaxBatchSize: 5}}),
		)
		if err != nil {
			t.Fatal(err)
		}
		const n = 20
		var wg sync.WaitGroup
		results := make([]batcher.Result, n)
		for i := range n {
			wg.Go(func() {
				results[i], _ = b.Do(t.Context(), &batcher.Request{Route: "embed", Input: text(strings.Repeat("x", i+1))})
			})
		}
		wg.Wait()
		direct := newProvider(t, sim.Config{})
		for i, r := range results {
			want, _ := direct.Call(t.Context(), "embed", text(strings.Repeat("x", i+1)), batcher.Params{})
			if r.Err != nil || !equalVec(r.Embedding, want.Embedding) {
				t.Errorf("result %d: %+v, want the embedding of its own input", i, r)
			}
		}
		if s := p.Stats(); s.RateLimited != 0 || s.MaxConcurrent > 2 || s.Items != n || s.Calls >= n {
			t.Errorf("stats %+v: want %d items in fewer calls, no 429s", s, n)
		}
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzGenerate(f *testing.F) {
	f.Add("hello world", int32(5), "wor")
	f.Add("", int32(1), "")
	f.Add("\xff\xfe broken utf8 ééééééééééééééééééé", int32(100), "é")
	p, err := sim.New(sim.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, maxTokens int32, stop string) {
		params := batcher.Params{MaxTokens: maxTokens}
		if stop != "" {
			params.Stop = []string{stop}
		}
		for _, in := range []batcher.Input{prompt(s), chat(s)} {
			r, err := p.Call(t.Context(), "m", in, params)
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(r.Text) {
				t.Errorf("text %q is not valid UTF-8", r.Text)
			}
			limit := maxTokens
			if limit <= 0 {
				limit = sim.DefaultMaxTokens
			}
			if r.Usage.CompletionTokens > limit || r.Usage.CompletionTokens < 0 {
				t.Errorf("%d completion tokens, limit %d", r.Usage.CompletionTokens, limit)
			}
			if stop != "" && strings.Contains(r.Text, stop) {
				t.Errorf("text %q holds the stop sequence %q", r.Text, stop)
			}
		}
		e, err := p.Call(t.Context(), "m", text(s), batcher.Params{})
		if err != nil || len(e.Embedding) != sim.DefaultDimensions {
			t.Fatalf("embedding: %v, %d dimensions", err, len(e.Embedding))
		}
	})
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalVec(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
