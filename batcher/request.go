package batcher

import (
	"net"
	"strconv"
	"time"
)

// Priority orders work when dispatch capacity is scarce. The zero value is
// PriorityNormal.
type Priority uint8

// The priorities.
const (
	PriorityNormal Priority = iota
	PriorityUrgent
	PriorityHigh
	PriorityLow
	PriorityDeferrable

	numPriorities = int(PriorityDeferrable) + 1
)

var priorityNames = [numPriorities]string{"normal", "urgent", "high", "low", "deferrable"}

// levels maps a priority to its urgency: 0 goes first.
var levels = [numPriorities]int{PriorityNormal: 2, PriorityUrgent: 0, PriorityHigh: 1, PriorityLow: 3, PriorityDeferrable: 4}

// level returns p's urgency, 0 (URGENT) to 4 (DEFERRABLE).
func (p Priority) level() int { return levels[p] }

// background reports whether p may not use the share held for URGENT and
// HIGH work.
func (p Priority) background() bool { return p.level() > levels[PriorityHigh] }

func (p Priority) String() string {
	if int(p) < numPriorities {
		return priorityNames[p]
	}
	return "priority(" + strconv.Itoa(int(p)) + ")"
}

// Operation is the kind of model call a route serves.
type Operation uint8

// The operations.
const (
	OpChat Operation = iota + 1
	OpCompletion
	OpEmbedding
)

func (o Operation) String() string {
	switch o {
	case OpChat:
		return "chat"
	case OpCompletion:
		return "completion"
	case OpEmbedding:
		return "embedding"
	}
	return "operation(" + strconv.Itoa(int(o)) + ")"
}

// Dedup says whether identical requests in flight together may share one
// upstream call.
type Dedup uint8

// The dedup modes.
const (
	// DedupAuto shares only deterministic requests: embeddings, and
	// temperature 0 with a fixed seed.
	DedupAuto Dedup = iota
	DedupOn
	DedupOff
)

// Message is one turn of a chat.
type Message struct {
	Role    string
	Content string
	// Parts, when set, is the content as parts (Content is then empty).
	Parts []ContentPart
	// Name optionally names the participant.
	Name string
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers: required for role
	// "tool", refused for any other role.
	ToolCallID string
}

// Input is a request's input. Op says which of its fields is set.
type Input struct {
	Op       Operation
	Messages []Message // OpChat
	Prompt   string    // OpCompletion
	Text     string    // OpEmbedding
}

// Size returns the input's size in bytes, as limited by MaxInputBytes.
func (in *Input) Size() int {
	switch in.Op {
	case OpChat:
		return in.chatSize()
	case OpCompletion:
		return len(in.Prompt)
	case OpEmbedding:
		return len(in.Text)
	}
	return 0
}

// chatSize is Size for OpChat; apart, so that Size stays small enough to
// be inlined on the admission path.
func (in *Input) chatSize() int {
	n := 0
	for i := range in.Messages {
		m := &in.Messages[i]
		n += len(m.Content)
		if m.rich() {
			n += m.richSize()
		}
	}
	return n
}

// richSize is the size of m's fields beyond Role and Content.
func (m *Message) richSize() int {
	n := len(m.Name) + len(m.ToolCallID)
	for j := range m.Parts {
		n += len(m.Parts[j].Text) + len(m.Parts[j].ImageURL)
	}
	for j := range m.ToolCalls {
		c := &m.ToolCalls[j]
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return n
}

// Params are the generation parameters. Nil means unset.
type Params struct {
	MaxTokens   int32 // 0: the route's default
	Temperature *float32
	TopP        *float32
	Stop        []string
	Seed        *int64

	// Rich holds the parameters only some backends honour (see Features).
	// Nil for a request that sets none of them, which so carries one
	// pointer for them, not their 64 bytes (BenchmarkQueuedMemory); nil and
	// a pointer to zero parameters mean the same.
	Rich *RichParams
}

// RichParams are the generation parameters only some backends honour (see
// Features), behind Params.Rich.
type RichParams struct {
	PresencePenalty  *float32
	FrequencyPenalty *float32
	N                int32 // choices to generate; 0 and 1: one
	LogitBias        map[string]float32
	Logprobs         bool
	TopLogprobs      *int32
	ReasoningEffort  string
}

// IsZero reports whether p sets no parameter (an empty LogitBias sets
// none), so that a door leaves Params.Rich nil.
func (p *RichParams) IsZero() bool {
	return p.PresencePenalty == nil && p.FrequencyPenalty == nil && p.N == 0 && len(p.LogitBias) == 0 &&
		!p.Logprobs && p.TopLogprobs == nil && p.ReasoningEffort == ""
}

// Request is one model call.
//
// The batcher reads a Request until its Call is done and never writes it; the
// caller must not change it before then. A call that ended early (cancelled,
// or its deadline passed) while its batch was upstream leaves the Request
// with that batch's Backend until the upstream call returns: do not reuse
// such a Request.
type Request struct {
	// ID is the caller's id, carried into events and results.
	ID string
	// Route names the configured route (the model callers ask for).
	Route    string
	Priority Priority
	// Dedup is beside Priority, whose padding it uses: the Request stays
	// within 256 bytes (TestRequestSize).
	Dedup  Dedup
	Input  Input
	Params Params
	// Timeout, when positive, bounds the request's life from admission.
	Timeout  time.Duration
	Metadata map[string]string
	// Sink, when set, receives the request's progress events and its
	// terminal EventDone.
	Sink EventSink
	// Retry, when set, overrides the backend's retry policy for this
	// request (a batch job's own max_retries and retry_delay).
	Retry *RetryOverride
	// Tenant names the caller's tenant, for weighted fair queuing and
	// quotas (see SetTenants). Empty: no tenant.
	Tenant string
	// Conn is the caller's connection's remote address, so that the lane
	// cap's fair share applies per connection within a tenant
	// (WithMaxLanes). It is read only when the request opens a lane. Nil:
	// one connection.
	Conn net.Addr
	// Cache is what the request asks of the response cache (WithCache).
	Cache CacheMode
	// Stream asks for the answer's deltas as the model generates them
	// (Call.Deltas; stream.go). A streamed request goes upstream alone.
	Stream bool

	// Chat holds a chat request's options beyond text: tools, tool choice,
	// response format, user and extra body fields (chat.go). Nil for a
	// plain request, which so copies one pointer for them, not the options.
	Chat *ChatOptions
}

// PolicyMaxRetries in RetryOverride.MaxRetries keeps the backend policy's
// retry count (to override only the first backoff).
const PolicyMaxRetries = -1

// RetryOverride overrides parts of a backend's RetryPolicy for one request.
// Which errors are retryable, the retry budget and the deadline still apply.
type RetryOverride struct {
	// MaxRetries replaces the policy's MaxRetries; 0 means no retry, and
	// PolicyMaxRetries (any negative value) keeps the policy's.
	MaxRetries int
	// InitialBackoff, when positive, replaces the policy's InitialBackoff
	// (and raises its MaxBackoff to it if needed).
	InitialBackoff time.Duration
	// Factor, when at least 1, replaces the policy's backoff Factor; 0
	// keeps the policy's. Submit refuses other values as ErrInvalid.
	Factor float64
}

// retryPolicy returns the policy for req's retries on a backend whose policy
// is p.
func (req *Request) retryPolicy(p *RetryPolicy) *RetryPolicy {
	o := req.Retry
	if o == nil {
		return p
	}
	q := *p
	if o.MaxRetries >= 0 {
		q.MaxRetries = o.MaxRetries
	}
	if o.InitialBackoff > 0 {
		q.InitialBackoff = o.InitialBackoff
		q.MaxBackoff = max(q.MaxBackoff, o.InitialBackoff)
	}
	if o.Factor >= 1 {
		q.Factor = o.Factor
	}
	return &q
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int32
	CompletionTokens int32
}

// Total returns prompt plus completion tokens.
func (u Usage) Total() int32 { return u.PromptTokens + u.CompletionTokens }

// FinishReason says why generation stopped.
type FinishReason uint8

// The finish reasons.
const (
	FinishUnspecified FinishReason = iota
	FinishStop
	FinishLength
	FinishContentFilter
)

// Timings break down where a request's time went.
type Timings struct {
	BatchWait time.Duration // admission until its batch was formed
	Queued    time.Duration // admission until its first upstream call
	Upstream  time.Duration // time in upstream calls, over all attempts
	Total     time.Duration // admission until the terminal result
	// FirstToken is a streamed request's time from admission to its first
	// delta; 0 when none came.
	FirstToken time.Duration
}

// Result is a request's terminal result. Err is nil on success.
type Result struct {
	Text         string
	Embedding    []float32
	FinishReason FinishReason
	Usage        Usage
	// Chat holds a chat answer's tool calls, refusal, log probabilities and
	// choices (chat.go); nil for a plain text answer.
	Chat *ChatOutput

	// BatchID and BatchSize are the caller's view of the batch that
	// carried it: with a Tenant, that tenant's own name for the batch and
	// its own requests' count in it (see batchview.go); without, the batch
	// whole.
	BatchID      string
	BatchSize    int
	Attempts     int
	Backend      string
	Deduplicated bool
	// Cached: the answer came from the response cache, not the upstream.
	Cached bool
	// Partial: a streamed request failed after deltas had reached its
	// caller; Text holds the answer as far as it was streamed, Err what
	// ended it. (Beside the other flags: a Result is copied several times
	// on every request's way back, so it wastes no padding.)
	Partial bool
	Timings Timings

	Err error
}
