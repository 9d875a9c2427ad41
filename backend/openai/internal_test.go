package openai

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		total   int64
		weights []int
		want    []int32
	}{
		{9, []int{1, 2, 6}, []int32{1, 2, 6}},
		{10, []int{1, 1, 1}, []int32{4, 3, 3}},
		{10, []int{0, 0}, []int32{5, 5}},
		{7, []int{0, 5}, []int32{0, 7}},
		{0, []int{3, 4}, []int32{0, 0}},
		{-5, []int{3, 4}, []int32{0, 0}},
		{1, []int{1, 3, 1}, []int32{0, 1, 0}},
		{100, []int{1 << 62, 1 << 62}, []int32{50, 50}},
		{5, nil, []int32{}},
	}
	for _, tt := range tests {
		got := split(tt.total, tt.weights)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("split(%d, %v) = %v, want %v", tt.total, tt.weights, got, tt.want)
		}
	}
}

func FuzzSplit(f *testing.F) {
	f.Add(int64(100), 3, 5, 0)
	f.Add(int64(1<<40), 0, 0, 0)
	f.Fuzz(func(t *testing.T, total int64, a, b, c int) {
		got := split(total, []int{a, b, c})
		var sum int64
		for _, g := range got {
			if g < 0 {
				t.Fatalf("negative share %v", got)
			}
			sum += int64(g)
		}
		if want := max(0, min(total, 1<<31-1)); sum != want {
			t.Fatalf("split(%d, %d %d %d) = %v adds up to %d, want %d", total, a, b, c, got, sum, want)
		}
	})
}

func TestParseRateLimit(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := func(kv ...string) http.Header {
		hh := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			hh.Set(kv[i], kv[i+1])
		}
		return hh
	}
	none := batcher.RateLimitInfo{RemainingRequests: -1, RemainingTokens: -1}
	with := func(f func(*batcher.RateLimitInfo)) *batcher.RateLimitInfo { r := none; f(&r); return &r }
	tests := []struct {
		name string
		h    http.Header
		want *batcher.RateLimitInfo
	}{
		{"nothing", h(), nil},
		{"garbage only", h("Retry-After", "soon", "x-ratelimit-remaining-requests", "-3", "x-ratelimit-reset-tokens", "later"), nil},
		{"retry-after seconds", h("Retry-After", "20"), with(func(r *batcher.RateLimitInfo) { r.RetryAfter = 20 * time.Second })},
		{"retry-after fraction", h("Retry-After", "1.5"), with(func(r *batcher.RateLimitInfo) { r.RetryAfter = 1500 * time.Millisecond })},
		{"retry-after date", h("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), with(func(r *batcher.RateLimitInfo) { r.RetryAfter = 90 * time.Second })},
		{"retry-after past date", h("Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)), with(func(r *batcher.RateLimitInfo) { r.RetryAfter = 0 })},
		{"retry-after-ms wins", h("Retry-After", "1", "retry-after-ms", "250"), with(func(r *batcher.RateLimitInfo) { r.RetryAfter = 250 * time.Millisecond })},
		{"retry-after capped", h("Retry-After", "999999999999"), with(func(r *batcher.RateLimitInfo) { r.RetryAfter = time.Hour })},
		{"openai headers", h("x-ratelimit-remaining-requests", "59", "x-ratelimit-remaining-tokens", "149984",
			"x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "6m0s"), with(func(r *batcher.RateLimitInfo) {
			r.RemainingRequests, r.RemainingTokens, r.ResetRequests, r.ResetTokens = 59, 149984, time.Second, 6*time.Minute
		})},
		{"limits", h("x-ratelimit-limit-requests", "600", "x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-requests", "599"), with(func(r *batcher.RateLimitInfo) {
			r.LimitRequests, r.LimitTokens, r.RemainingRequests = 600, 150000, 599
		})},
		{"reset ms and fractions", h("x-ratelimit-reset-requests", "20ms", "x-ratelimit-reset-tokens", "2m59.56s"), with(func(r *batcher.RateLimitInfo) {
			r.ResetRequests, r.ResetTokens = 20*time.Millisecond, 2*time.Minute+59560*time.Millisecond
		})},
		{"reset bare seconds", h("x-ratelimit-reset-requests", "60"), with(func(r *batcher.RateLimitInfo) { r.ResetRequests = time.Minute })},
		{"reset rfc3339", h("x-ratelimit-reset-tokens", now.Add(30*time.Second).Format(time.RFC3339)), with(func(r *batcher.RateLimitInfo) { r.ResetTokens = 30 * time.Second })},
	}
	for _, tt := range tests {
		got := ParseRateLimit(tt.h, now)
		if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func FuzzParseRateLimit(f *testing.F) {
	f.Add("20", "250", "59", "149984", "1s", "6m0s")
	f.Add("Wed, 21 Oct 2015 07:28:00 GMT", "", "", "", "2m59.56s", "2026-01-02T03:04:05Z")
	f.Add("-1", "NaN", "x", "9999999999999999999999", "-5s", "1e308")
	f.Fuzz(func(t *testing.T, ra, ram, rr, rt, xr, xt string) {
		h := http.Header{}
		for k, v := range map[string]string{"Retry-After": ra, "retry-after-ms": ram, "x-ratelimit-remaining-requests": rr,
			"x-ratelimit-remaining-tokens": rt, "x-ratelimit-reset-requests": xr, "x-ratelimit-reset-tokens": xt} {
			h.Set(k, v)
		}
		rl := ParseRateLimit(h, time.Unix(1e9, 0))
		if rl == nil {
			return
		}
		for _, d := range []time.Duration{rl.RetryAfter, rl.ResetRequests, rl.ResetTokens} {
			if d < 0 || d > time.Hour {
				t.Fatalf("duration %v out of [0, 1h]: %+v", d, rl)
			}
		}
		if rl.RemainingRequests < -1 || rl.RemainingTokens < -1 {
			t.Fatalf("remaining below -1: %+v", rl)
		}
	})
}

func TestRedact(t *testing.T) {
	b := &Backend{cfg: &config{apiKey: "my-very-own-key"}}
	for in, want := range map[string]string{
		"key my-very-own-key here":                          "key [redacted] here",
		"Incorrect API key provided: sk-proj-abc*****wxyz.": "Incorrect API key provided: [redacted]",
		"gsk_ is not matched but gsk-abcdefgh is":           "gsk_ is not matched but [redacted] is",
		"nothing secret":                                    "nothing secret",
	} {
		if got := b.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := clean("a\nb\x00c\t  d" + strings.Repeat("x", 300)); strings.ContainsAny(got, "\n\x00\t") || len(got) > maxMessageBytes+len("…") {
		t.Errorf("clean: %q", got)
	}
}

func TestPlan(t *testing.T) {
	b := &Backend{cfg: &config{Config: Config{Pack: PackConfig{Enabled: true, MaxItems: 3, MaxTokens: 1000}}}}
	msg := func(roleContent ...string) *batcher.Request {
		r := &batcher.Request{Input: batcher.Input{Op: batcher.OpChat}}
		for i := 0; i+1 < len(roleContent); i += 2 {
			r.Input.Messages = append(r.Input.Messages, batcher.Message{Role: roleContent[i], Content: roleContent[i+1]})
		}
		return r
	}
	stop := msg("user", "with stop")
	stop.Params.Stop = []string{"x"}
	reqs := []*batcher.Request{
		msg("user", "a"),                // 0: group ""
		msg("system", "S", "user", "b"), // 1: group "S"
		msg("user", "c"),                // 2: group ""
		msg("user", "q", "assistant", "r", "user", "follow"), // 3: not packable: a conversation
		stop, // 4: not packable: stop sequences
		msg("user", strings.Repeat("long ", 1000)),    // 5: not packable: too many tokens
		msg("system", "S", "user", "d"),               // 6: group "S"
		msg("user", "e"),                              // 7: group ""
		msg("user", "f"),                              // 8: group "", starts a second pack
		msg("developer", "S2", "user", "g"),           // 9: group "S2", alone: single
		msg("user", "h"),                              // 10: group "", joins the second pack
		msg("user", "last", "user", "two user turns"), // 11: not packable
	}
	batch := &batcher.Batch{Op: batcher.OpChat, Requests: reqs, MaxTokens: 100}
	packs, singles := b.plan(batch)
	if got := fmt.Sprint(packs); got != "[[0 2 7] [8 10] [1 6]]" {
		t.Errorf("packs %s", got)
	}
	if got := fmt.Sprint(singles); got != "[3 4 5 11 9]" {
		t.Errorf("singles %s", got)
	}
	// The token cap: 100 (prompt) + 3×(1+100+16) = 451 > 400.
	b.cfg.Pack.MaxTokens = 400
	packs, _ = b.plan(&batcher.Batch{Op: batcher.OpChat, Requests: []*batcher.Request{msg("user", "a"), msg("user", "b"), msg("user", "c")}, MaxTokens: 100})
	if got := fmt.Sprint(packs); got != "[[0 1]]" {
		t.Errorf("packs under a token cap: %s", got)
	}
}

func TestUpstreamCalls(t *testing.T) {
	all := &Backend{cfg: &config{Config: Config{Pack: PackConfig{Enabled: true, MaxItems: 4}}}}
	some := &Backend{cfg: &config{Config: Config{Pack: PackConfig{Enabled: true, MaxItems: 4}}, routes: map[string]bool{"r": true}}}
	off := &Backend{cfg: &config{}}
	for _, tt := range []struct {
		b     *Backend
		route string
		op    batcher.Operation
		n     int
		want  int
	}{
		{off, "r", batcher.OpEmbedding, 100, 1},
		{off, "r", batcher.OpCompletion, 10, 1},
		{off, "r", batcher.OpChat, 10, 10},
		{all, "r", batcher.OpChat, 10, 3},
		{all, "r", batcher.OpChat, 1, 1},
		{some, "r", batcher.OpChat, 10, 3},
		{some, "other", batcher.OpChat, 10, 10},
	} {
		if got := tt.b.UpstreamCalls(tt.route, tt.op, tt.n); got != tt.want {
			t.Errorf("UpstreamCalls(%q, %v, %d) = %d, want %d", tt.route, tt.op, tt.n, got, tt.want)
		}
	}
}
