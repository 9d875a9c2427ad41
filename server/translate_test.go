package server

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestToCore(t *testing.T) {
	in := &batcherv1.Request{
		Id: "x", Model: "m", Priority: batcherv1.Priority_PRIORITY_DEFERRABLE,
		Input: &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: []*batcherv1.ChatMessage{
			{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"},
		}}},
		Params: &batcherv1.GenerationParams{
			MaxTokens: proto.Int32(7), Temperature: proto.Float32(0.5), TopP: proto.Float32(0.9),
			Stop: []string{"\n"}, Seed: proto.Int64(42),
		},
		Timeout:  durationpb.New(1500 * time.Millisecond),
		Metadata: map[string]string{"k": "v"},
		Dedup:    batcherv1.Dedup_DEDUP_ON,
		Cache:    batcherv1.CacheMode_CACHE_MODE_REFRESH,
	}
	var got batcher.Request
	if st := toCore(in, &got); st != nil {
		t.Fatalf("toCore: %v", st)
	}
	p := got.Params
	switch {
	case got.ID != "x" || got.Route != "m" || got.Priority != batcher.PriorityDeferrable:
		t.Fatalf("id/route/priority = %q %q %v", got.ID, got.Route, got.Priority)
	case got.Input.Op != batcher.OpChat || len(got.Input.Messages) != 2 || !reflect.DeepEqual(got.Input.Messages[1], batcher.Message{Role: "user", Content: "hi"}):
		t.Fatalf("input = %+v", got.Input)
	case p.MaxTokens != 7 || *p.Temperature != 0.5 || *p.TopP != 0.9 || *p.Seed != 42 || len(p.Stop) != 1:
		t.Fatalf("params = %+v", p)
	case got.Timeout != 1500*time.Millisecond || got.Metadata["k"] != "v" || got.Dedup != batcher.DedupOn:
		t.Fatalf("timeout/metadata/dedup = %v %v %v", got.Timeout, got.Metadata, got.Dedup)
	case got.Cache != batcher.CacheRefresh:
		t.Fatalf("cache = %v", got.Cache)
	}
	for m, want := range map[batcherv1.CacheMode]batcher.CacheMode{
		batcherv1.CacheMode_CACHE_MODE_UNSPECIFIED: batcher.CacheAuto,
		batcherv1.CacheMode_CACHE_MODE_USE:         batcher.CacheUse,
		batcherv1.CacheMode_CACHE_MODE_BYPASS:      batcher.CacheBypass,
	} {
		var r batcher.Request
		if toCore(&batcherv1.Request{Cache: m}, &r); r.Cache != want {
			t.Errorf("%v -> %v, want %v", m, r.Cache, want)
		}
	}
	var bad batcher.Request
	if st := toCore(&batcherv1.Request{Cache: 9}, &bad); st == nil || !strings.Contains(st.Message(), "request.cache") {
		t.Fatalf("unknown cache mode: %v", st)
	}

	// Unset fields take the core's defaults.
	var def batcher.Request
	if st := toCore(&batcherv1.Request{}, &def); st != nil {
		t.Fatal(st)
	}
	if def.Priority != batcher.PriorityNormal || def.Dedup != batcher.DedupAuto || def.Input.Op != 0 ||
		def.Params.Temperature != nil || def.Params.MaxTokens != 0 || def.Timeout != 0 {
		t.Fatalf("defaults = %+v", def)
	}

	for proto, want := range map[batcherv1.Priority]batcher.Priority{
		batcherv1.Priority_PRIORITY_URGENT: batcher.PriorityUrgent,
		batcherv1.Priority_PRIORITY_HIGH:   batcher.PriorityHigh,
		batcherv1.Priority_PRIORITY_NORMAL: batcher.PriorityNormal,
		batcherv1.Priority_PRIORITY_LOW:    batcher.PriorityLow,
	} {
		var r batcher.Request
		if toCore(&batcherv1.Request{Priority: proto}, &r); r.Priority != want {
			t.Errorf("%v -> %v, want %v", proto, r.Priority, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	req := &batcher.Request{ID: "r", Metadata: map[string]string{"a": "b"}}
	emb := []float32{1, 2}
	c := completion(req, &batcher.Result{
		Embedding: emb, FinishReason: batcher.FinishLength, Usage: batcher.Usage{PromptTokens: 2, CompletionTokens: 5},
		BatchID: "b1", BatchSize: 4, Attempts: 2, Backend: "be", Deduplicated: true, Cached: true,
		Timings: batcher.Timings{BatchWait: time.Millisecond, Queued: 2 * time.Millisecond, Upstream: 3 * time.Millisecond, Total: 9 * time.Millisecond},
	})
	emb[0] = 99 // the completion holds its own copy
	switch {
	case c.GetId() != "r" || c.GetEmbedding().GetValues()[0] != 1 || c.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_LENGTH:
		t.Fatalf("completion %v", c)
	case c.GetUsage().GetTotalTokens() != 7 || c.GetBatchId() != "b1" || c.GetBatchSize() != 4 || c.GetAttempts() != 2:
		t.Fatalf("completion %v", c)
	case c.GetBackend() != "be" || !c.GetDeduplicated() || !c.GetCached() || c.GetMetadata()["a"] != "b" || c.GetError() != nil:
		t.Fatalf("completion %v", c)
	case c.GetTimings().GetTotal().AsDuration() != 9*time.Millisecond || c.GetTimings().GetUpstream().AsDuration() != 3*time.Millisecond:
		t.Fatalf("timings %v", c.GetTimings())
	}

	failed := completion(req, &batcher.Result{Text: "ignored", BatchID: "b2", Err: batcher.ErrDeadline})
	if failed.GetOutput() != nil || failed.GetError().GetCode() != int32(codes.DeadlineExceeded) || failed.GetBatchId() != "b2" || failed.Usage != nil {
		t.Fatalf("failed completion %v", failed)
	}

	// A backend that reports no tokens: usage is unset, not zeros. Only
	// the prompt's or only the completion's count still sets it.
	for _, tc := range []struct {
		u    batcher.Usage
		want bool
	}{{batcher.Usage{}, false}, {batcher.Usage{PromptTokens: 3}, true}, {batcher.Usage{CompletionTokens: 4}, true}} {
		c := completion(req, &batcher.Result{Text: "ok", Usage: tc.u})
		if (c.Usage != nil) != tc.want || c.GetUsage().GetTotalTokens() != tc.u.Total() {
			t.Errorf("usage %+v: completion's usage %v, want set %v", tc.u, c.Usage, tc.want)
		}
	}
}

func TestEvent(t *testing.T) {
	req := &batcher.Request{ID: "r"}
	now := time.Unix(100, 0)
	tests := []struct {
		ev   batcher.Event
		want string
	}{
		{batcher.Event{Kind: batcher.EventQueued, Lane: "chat{max_tokens=256}"}, `queued:{lane:"chat{max_tokens=256}"}`},
		{batcher.Event{Kind: batcher.EventBatched, BatchID: "b1", BatchSize: 3}, `batched:{batch_id:"b1" batch_size:3}`},
		{batcher.Event{Kind: batcher.EventDispatched, BatchID: "b1", Attempt: 1, Backend: "be"}, `dispatched:{batch_id:"b1" attempt:1 backend:"be"}`},
		{batcher.Event{Kind: batcher.EventRetrying, Attempt: 1, Delay: time.Second, Class: batcher.ClassRateLimit,
			Err: &batcher.UpstreamError{Class: batcher.ClassRateLimit, Message: "slow", Err: errors.New("sk-SECRET")}},
			`retrying:{attempt:1 delay:{seconds:1} reason:"rate_limit" message:"upstream rate limit reached: slow"}`},
	}
	for _, tt := range tests {
		tt.ev.Request, tt.ev.Time = req, now
		e := event(&tt.ev)
		got := strings.Join(strings.Fields(e.String()), " ")
		if e.GetId() != "r" || !e.GetTime().AsTime().Equal(now) || !strings.Contains(got, tt.want) {
			t.Errorf("event(%v) = %s, want %s", tt.ev.Kind, got, tt.want)
		}
	}
	if e := event(&batcher.Event{Kind: 99, Request: req}); e != nil {
		t.Errorf("unknown kind gave %v", e)
	}
}

// FuzzTranslateRequest feeds arbitrary SubmitRequest bytes through the
// translation and the core's validation (a cancelled context stops Submit
// right after validating). Nothing may panic; every refusal must be
// INVALID_ARGUMENT naming a request field.
func FuzzTranslateRequest(f *testing.F) {
	be := newFake()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "fake", Backend: be}),
		batcher.WithRoute(batcher.Route{Name: routeChat, Op: batcher.OpChat, Backend: "fake", MaxInputBytes: 64}),
		batcher.WithRoute(batcher.Route{Name: routeEmbed, Op: batcher.OpEmbedding, Backend: "fake"}),
	)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	seeds := []*batcherv1.Request{chatReq("a", "hello"), {Model: routeEmbed,
		Input: &batcherv1.Request_Embedding{Embedding: &batcherv1.EmbeddingInput{Text: "x"}}}}
	for _, br := range badRequests() {
		// Small seeds keep minimizing fast; one over-size prompt is enough.
		if proto.Size(br.req) <= 256 {
			seeds = append(seeds, br.req)
		}
	}
	seeds = append(seeds, chatReq("big", strings.Repeat("x", 65)))
	nan := chatReq("n", "x")
	nan.Params = &batcherv1.GenerationParams{Temperature: proto.Float32(float32(math.NaN())), TopP: proto.Float32(float32(math.Inf(1)))}
	huge := chatReq("h", "x")
	huge.Timeout = &durationpb.Duration{Seconds: math.MaxInt64}
	seeds = append(seeds, nan, huge, richChatReq("r"))
	for _, r := range seeds {
		b, err := proto.Marshal(&batcherv1.SubmitRequest{Request: r})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})

	f.Fuzz(func(t *testing.T, data []byte) {
		var in batcherv1.SubmitRequest
		if proto.Unmarshal(data, &in) != nil {
			return
		}
		var req batcher.Request
		if st := toCore(in.GetRequest(), &req); st != nil {
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "request") {
				t.Fatalf("toCore refused with %v %q", st.Code(), st.Message())
			}
			return
		}
		_, err := core.Submit(cancelled, &req)
		switch {
		case errors.Is(err, batcher.ErrCanceled):
		case errors.Is(err, batcher.ErrInvalid):
			st := toStatus(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "request.") {
				t.Fatalf("invalid request mapped to %v %q", st.Code(), st.Message())
			}
		default:
			t.Fatalf("Submit with a cancelled context: %v", err)
		}
	})
}

// FuzzStreamOptions: any options either apply or name the bad field.
func FuzzStreamOptions(f *testing.F) {
	f.Add(int32(0), int64(1), int32(0))
	f.Add(int32(1), int64(0), int32(100_000_000))
	f.Add(int32(9), int64(-1), int32(5))
	f.Add(int32(2), int64(math.MaxInt64), int32(999_999_999))
	f.Fuzz(func(t *testing.T, verbosity int32, sec int64, nanos int32) {
		o := &batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity(verbosity), SummaryInterval: &durationpb.Duration{Seconds: sec, Nanos: nanos}}
		_, d, st := streamOptions(o, DefaultSummaryInterval)
		if st != nil {
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "options.") {
				t.Fatalf("refused with %v %q", st.Code(), st.Message())
			}
			return
		}
		if d < MinSummaryInterval || d > MaxSummaryInterval {
			t.Fatalf("accepted interval %v", d)
		}
	})
}
