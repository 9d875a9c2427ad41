package server

import (
	"slices"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Summary interval bounds, for StreamOptions and WithSummaryInterval.
const (
	MinSummaryInterval = 100 * time.Millisecond
	MaxSummaryInterval = time.Hour
)

// toCore translates pr into dst. It checks what the core cannot see once the
// message is translated (unknown enum values, malformed durations, an
// explicit max_tokens of 0) and returns INVALID_ARGUMENT naming the proto
// field; everything else is the core's to validate. dst shares pr's strings,
// slices and map: neither side writes them afterwards.
func toCore(pr *batcherv1.Request, dst *batcher.Request) *status.Status {
	if pr == nil {
		return invalidArgument("request", "must be set")
	}
	dst.ID = pr.GetId()
	dst.Route = pr.GetModel()
	switch p := pr.GetPriority(); p {
	case batcherv1.Priority_PRIORITY_UNSPECIFIED, batcherv1.Priority_PRIORITY_NORMAL:
		dst.Priority = batcher.PriorityNormal
	case batcherv1.Priority_PRIORITY_URGENT:
		dst.Priority = batcher.PriorityUrgent
	case batcherv1.Priority_PRIORITY_HIGH:
		dst.Priority = batcher.PriorityHigh
	case batcherv1.Priority_PRIORITY_LOW:
		dst.Priority = batcher.PriorityLow
	case batcherv1.Priority_PRIORITY_DEFERRABLE:
		dst.Priority = batcher.PriorityDeferrable
	default:
		return invalidArgument("request.priority", "unknown value "+strconv.Itoa(int(p)))
	}

	switch in := pr.GetInput().(type) {
	case *batcherv1.Request_Chat:
		msgs := in.Chat.GetMessages()
		dst.Input = batcher.Input{Op: batcher.OpChat, Messages: make([]batcher.Message, len(msgs))}
		for i, m := range msgs {
			dst.Input.Messages[i] = batcher.Message{Role: m.GetRole(), Content: m.GetContent()}
			if len(m.Parts) > 0 || m.Name != "" || len(m.ToolCalls) > 0 || m.ToolCallId != "" {
				if st := messageToCore(m, i, &dst.Input.Messages[i]); st != nil {
					return st
				}
			}
		}
	case *batcherv1.Request_Completion:
		dst.Input = batcher.Input{Op: batcher.OpCompletion, Prompt: in.Completion.GetPrompt()}
	case *batcherv1.Request_Embedding:
		dst.Input = batcher.Input{Op: batcher.OpEmbedding, Text: in.Embedding.GetText()}
	default: // unset: the core names the operation the model needs
		dst.Input = batcher.Input{}
	}

	dst.Stream = pr.GetStream()
	dst.Params = batcher.Params{}
	if p := pr.GetParams(); p != nil {
		if p.MaxTokens != nil {
			if *p.MaxTokens < 1 {
				return invalidArgument("request.params.max_tokens", "must be at least 1, got "+strconv.Itoa(int(*p.MaxTokens)))
			}
			dst.Params.MaxTokens = *p.MaxTokens
		}
		dst.Params.Temperature = p.Temperature
		dst.Params.TopP = p.TopP
		dst.Params.Stop = p.Stop
		dst.Params.Seed = p.Seed
		if p.PresencePenalty != nil || p.FrequencyPenalty != nil || p.N != nil || len(p.LogitBias) > 0 ||
			p.Logprobs || p.TopLogprobs != nil || p.ReasoningEffort != "" {
			if st := richParamsToCore(p, &dst.Params); st != nil {
				return st
			}
		}
	}
	if st := chatOptionsToCore(pr, dst); st != nil {
		return st
	}

	dst.Timeout = 0
	if d := pr.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil {
			return invalidArgument("request.timeout", "invalid duration (seconds and nanos must share a sign and nanos stay within ±999999999)")
		}
		t := d.AsDuration()
		if t < 0 {
			return invalidArgument("request.timeout", "must not be negative, got "+t.String())
		}
		dst.Timeout = t
	}

	dst.Metadata = pr.GetMetadata()
	switch d := pr.GetDedup(); d {
	case batcherv1.Dedup_DEDUP_UNSPECIFIED:
		dst.Dedup = batcher.DedupAuto
	case batcherv1.Dedup_DEDUP_ON:
		dst.Dedup = batcher.DedupOn
	case batcherv1.Dedup_DEDUP_OFF:
		dst.Dedup = batcher.DedupOff
	default:
		return invalidArgument("request.dedup", "unknown value "+strconv.Itoa(int(d)))
	}
	if m := pr.GetCache(); int(m) < len(cacheModes) {
		dst.Cache = cacheModes[m]
	} else {
		return invalidArgument("request.cache", "unknown value "+strconv.Itoa(int(m)))
	}
	return nil
}

var cacheModes = [...]batcher.CacheMode{
	batcherv1.CacheMode_CACHE_MODE_UNSPECIFIED: batcher.CacheAuto,
	batcherv1.CacheMode_CACHE_MODE_USE:         batcher.CacheUse,
	batcherv1.CacheMode_CACHE_MODE_REFRESH:     batcher.CacheRefresh,
	batcherv1.CacheMode_CACHE_MODE_BYPASS:      batcher.CacheBypass,
}

// streamOptions translates a stream's options. It names the bad field.
func streamOptions(o *batcherv1.StreamOptions, def time.Duration) (batcherv1.Verbosity, time.Duration, *status.Status) {
	v := o.GetVerbosity()
	switch v {
	case batcherv1.Verbosity_VERBOSITY_UNSPECIFIED, batcherv1.Verbosity_VERBOSITY_ALL, batcherv1.Verbosity_VERBOSITY_COMPLETIONS:
	default:
		return 0, 0, invalidArgument("options.verbosity", "unknown value "+strconv.Itoa(int(v)))
	}
	interval := def
	if d := o.GetSummaryInterval(); d != nil {
		if err := d.CheckValid(); err != nil {
			return 0, 0, invalidArgument("options.summary_interval", "invalid duration")
		}
		interval = d.AsDuration()
		if interval < MinSummaryInterval || interval > MaxSummaryInterval {
			return 0, 0, invalidArgument("options.summary_interval",
				"must be "+MinSummaryInterval.String()+" to "+MaxSummaryInterval.String()+", got "+interval.String())
		}
	}
	return v, interval, nil
}

var finishReasons = [...]batcherv1.FinishReason{
	batcher.FinishUnspecified:   batcherv1.FinishReason_FINISH_REASON_UNSPECIFIED,
	batcher.FinishStop:          batcherv1.FinishReason_FINISH_REASON_STOP,
	batcher.FinishLength:        batcherv1.FinishReason_FINISH_REASON_LENGTH,
	batcher.FinishContentFilter: batcherv1.FinishReason_FINISH_REASON_CONTENT_FILTER,
	batcher.FinishToolCalls:     batcherv1.FinishReason_FINISH_REASON_TOOL_CALLS,
}

// completion translates a request's terminal result. It copies what it
// keeps, so it may run inside an EventSink.
func completion(req *batcher.Request, r *batcher.Result) *batcherv1.Completion {
	return new(completionMsg).fill(req, r)
}

// completionMsg is a Completion and the messages it points to, allocated
// as one block: a completion costs one allocation rather than eight. The
// block lives as long as any of its messages is referenced.
type completionMsg struct {
	c    batcherv1.Completion
	t    batcherv1.Timings
	d    [4]durationpb.Duration
	u    batcherv1.Usage
	text batcherv1.Completion_Text
}

// fill translates the result into m and returns m's Completion.
func (m *completionMsg) fill(req *batcher.Request, r *batcher.Result) *batcherv1.Completion {
	c := &m.c
	c.Id = req.ID
	c.BatchId = r.BatchID
	c.BatchSize = int32(r.BatchSize)
	c.Attempts = int32(r.Attempts)
	c.Backend = r.Backend
	// The request's map came from the caller's message; nobody writes it.
	c.Metadata = req.Metadata
	c.Deduplicated = r.Deduplicated
	c.Cached = r.Cached
	setDuration(&m.d[0], r.Timings.BatchWait)
	setDuration(&m.d[1], r.Timings.Queued)
	setDuration(&m.d[2], r.Timings.Upstream)
	setDuration(&m.d[3], r.Timings.Total)
	m.t.BatchWait, m.t.Queued, m.t.Upstream, m.t.Total = &m.d[0], &m.d[1], &m.d[2], &m.d[3]
	c.Timings = &m.t
	if r.Timings.FirstToken > 0 {
		c.TimeToFirstToken = durationpb.New(r.Timings.FirstToken)
	}
	if r.Err != nil {
		c.Error = toStatus(r.Err).Proto()
		if r.Partial { // the text the caller was streamed before the failure
			c.Partial = true
			m.text.Text = r.Text
			c.Output = &m.text
		}
		return c
	}
	if int(r.FinishReason) < len(finishReasons) {
		c.FinishReason = finishReasons[r.FinishReason]
	}
	if r.Usage != (batcher.Usage{}) { // unset, not zeros, when none was reported
		m.u.PromptTokens = r.Usage.PromptTokens
		m.u.CompletionTokens = r.Usage.CompletionTokens
		m.u.TotalTokens = r.Usage.Total()
		c.Usage = &m.u
	}
	if r.Embedding != nil {
		c.Output = &batcherv1.Completion_Embedding{Embedding: &batcherv1.Embedding{Values: slices.Clone(r.Embedding)}}
	} else {
		m.text.Text = r.Text
		c.Output = &m.text
	}
	if o := r.Chat; o != nil && (o.ToolCalls != nil || o.Refusal != "" || o.Logprobs != nil || o.Choices != nil) {
		outputMessages(c, r)
	}
	return c
}

// setDuration is durationpb.New into d.
func setDuration(d *durationpb.Duration, x time.Duration) {
	n := x.Nanoseconds()
	d.Seconds = n / 1e9
	d.Nanos = int32(n - d.Seconds*1e9)
}

// event translates a progress event other than EventDone; nil for a kind
// the wire does not know.
func event(ev *batcher.Event) *batcherv1.Event {
	e := &batcherv1.Event{Id: ev.Request.ID, Time: timestamppb.New(ev.Time)}
	switch ev.Kind {
	case batcher.EventQueued:
		e.Kind = &batcherv1.Event_Queued{Queued: &batcherv1.Queued{Lane: ev.Lane}}
	case batcher.EventBatched:
		e.Kind = &batcherv1.Event_Batched{Batched: &batcherv1.Batched{BatchId: ev.BatchID, BatchSize: int32(ev.BatchSize)}}
	case batcher.EventDispatched:
		e.Kind = &batcherv1.Event_Dispatched{Dispatched: &batcherv1.Dispatched{
			BatchId: ev.BatchID, Attempt: int32(ev.Attempt), Backend: ev.Backend,
		}}
	case batcher.EventRetrying:
		e.Kind = &batcherv1.Event_Retrying{Retrying: &batcherv1.Retrying{
			Attempt: int32(ev.Attempt),
			Delay:   durationpb.New(ev.Delay),
			Reason:  ev.Class.String(),
			Message: toStatus(ev.Err).Message(),
		}}
	default:
		return nil
	}
	return e
}
