package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/jsonscan"
	"github.com/batcherhq/batcher/openaiapi"
)

// MaxLineBytes bounds one OpenAI batch input line.
const MaxLineBytes = 4 << 20

// maxLineDepth is how deeply a line is walked for a repeated key:
// encoding/json's own limit, past which the line is refused anyway.
const maxLineDepth = 10000

// The endpoints an OpenAI batch line may name.
const (
	URLChat        = "/v1/chat/completions"
	URLCompletions = "/v1/completions"
	URLEmbeddings  = "/v1/embeddings"
)

type openAILine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// ParseOpenAILine parses one line of an OpenAI batch input file into its
// custom_id and request. The body is read by its endpoint's decoder, the
// front door's own (openaiapi.ChatBody, CompletionBody, EmbeddingBody),
// so that a line carries, and refuses, what a request to that endpoint
// does. The error names the field at fault; the caller adds the line
// number.
func ParseOpenAILine(line []byte) (customID string, req *ItemRequest, err error) {
	l, err := readOpenAILine(line)
	if err != nil {
		return l.CustomID, nil, err
	}
	var decode func([]byte) (*batcher.Request, *openaiapi.Error)
	switch l.URL {
	case URLChat:
		decode = openaiapi.ChatBody
	case URLCompletions:
		decode = openaiapi.CompletionBody
	case URLEmbeddings:
		decode = openaiapi.EmbeddingBody
	default:
		return l.CustomID, nil, fmt.Errorf("url: unknown endpoint %q (want %s, %s or %s)", cut(l.URL), URLChat, URLCompletions, URLEmbeddings)
	}
	r, e := decode(l.Body)
	if e != nil {
		if e.Param == "" {
			return l.CustomID, nil, fmt.Errorf("body: %s", e.Message)
		}
		return l.CustomID, nil, fmt.Errorf("body.%s: %s", e.Param, e.Message)
	}
	var tier struct {
		ServiceTier string `json:"service_tier"`
	}
	if json.Unmarshal(l.Body, &tier) != nil {
		return l.CustomID, nil, errors.New("body.service_tier: must be a string")
	}
	switch tier.ServiceTier {
	case "", "auto", "default", "flex", "scale", "priority":
	default:
		return l.CustomID, nil, fmt.Errorf("body.service_tier: must be auto, default, flex, scale or priority, got %q", cut(tier.ServiceTier))
	}
	// A job's items run at the job's priority whatever the tier; the tier
	// is carried to the output line, as OpenAI echoes it.
	req = &ItemRequest{Model: r.Route, URL: l.URL, ServiceTier: tier.ServiceTier, Input: r.Input, Params: r.Params, Metadata: r.Metadata}
	o := r.ChatOptions()
	req.Tools, req.ToolChoice, req.ParallelToolCalls = o.Tools, o.ToolChoice, o.ParallelToolCalls
	req.ResponseFormat, req.User, req.Extra = o.ResponseFormat, o.User, o.Extra
	return l.CustomID, req, nil
}

// readOpenAILine reads a line's envelope: custom_id, method, url and body.
// Its custom_id is set when the error comes after it was read.
func readOpenAILine(line []byte) (openAILine, error) {
	line = bytes.TrimSpace(line)
	if len(line) > MaxLineBytes {
		return openAILine{}, fmt.Errorf("line longer than %d bytes", MaxLineBytes)
	}
	var l openAILine
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&l); err != nil {
		return openAILine{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if dec.More() {
		return l, errors.New("malformed JSON: more than one value on the line")
	}
	// The decoder kept a repeated key's last value: the line would run
	// without what it said first. (A custom_id given twice labels no line.)
	if path, found := jsonscan.RepeatedKey(line, maxLineDepth); found {
		if path == "custom_id" {
			l.CustomID = ""
		}
		return l, fmt.Errorf("%s: given more than once; each key of a JSON object must be unique", cut(path))
	}
	if l.CustomID == "" {
		return openAILine{}, errors.New("custom_id: must be set")
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(line, &top) == nil {
		if k := firstUnread(top, lineFields); k != "" {
			return l, fmt.Errorf("%s: not a field of a batch line, which holds custom_id, method, url and body", cut(k))
		}
	}
	// The rule on ids every door applies; a custom_id that breaks it
	// cannot label the line's error line, so it is not kept.
	if ve := batcher.CheckID("custom_id", l.CustomID, MaxCustomIDBytes); ve != nil {
		return openAILine{}, ve
	}
	if l.Method != "" && l.Method != http.MethodPost {
		return l, fmt.Errorf("method: must be POST, got %q", cut(l.Method))
	}
	if len(l.Body) == 0 {
		return l, errors.New("body: must be a JSON object")
	}
	return l, nil
}

// lineFields are a batch input line's fields: OpenAI's envelope. Another
// (a priority, say) is refused by name, not dropped.
var lineFields = map[string]bool{"custom_id": true, "method": true, "url": true, "body": true}

func firstUnread(m map[string]json.RawMessage, read map[string]bool) string {
	first := ""
	for k, v := range m {
		if !read[k] && string(v) != "null" && (first == "" || k < first) {
			first = k
		}
	}
	return first
}

func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// The output line, as OpenAI's batch API writes it.
type outputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *outputResponse `json:"response"`
	Error    *outputError    `json:"error"`
	// Batcher's tags, present when the job has run groups or a judge.
	Batcher *outputTags `json:"batcher,omitempty"`
	// How a successful task was sent (online, batch_api), and what it cost
	// in USD at its route's price table (absent without one).
	Dispatch string   `json:"dispatch,omitempty"`
	Cost     *float64 `json:"cost_usd,omitempty"`
}

type outputResponse struct {
	StatusCode int `json:"status_code"`
	// RequestID is the line's own: OpenAI gives each request of a batch
	// one.
	RequestID string `json:"request_id"`
	Body      any    `json:"body"`
}

type outputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type outputTags struct {
	Item  int64  `json:"item"`
	Group string `json:"group,omitempty"`
	Run   int    `json:"run"`
	Judge bool   `json:"judge,omitempty"`
	Model string `json:"model,omitempty"`
	// JudgePrompt is what the judge received.
	JudgePrompt string `json:"judge_prompt,omitempty"`
}

type chatBody struct {
	ID          string       `json:"id"`
	Object      string       `json:"object"`
	Created     int64        `json:"created"`
	Model       string       `json:"model"`
	Choices     []chatChoice `json:"choices"`
	Usage       usageBody    `json:"usage"`
	ServiceTier string       `json:"service_tier,omitempty"`
}

type chatChoice struct {
	Index        int     `json:"index"`
	Text         *string `json:"text,omitempty"`
	FinishReason string  `json:"finish_reason"`
}

type usageBody struct {
	PromptTokens     int32 `json:"prompt_tokens"`
	CompletionTokens int32 `json:"completion_tokens"`
	TotalTokens      int32 `json:"total_tokens"`
}

type embeddingBody struct {
	Object string          `json:"object"`
	Data   []embeddingData `json:"data"`
	Model  string          `json:"model"`
	Usage  usageBody       `json:"usage"`
}

type embeddingData struct {
	Object    string    `json:"object"`
	Index     int       `json:"index"`
	Embedding []float32 `json:"embedding"`
}

// requestID is an output line's request id: the job's and the task's, so
// that it is unique across jobs and the same when a resumed job writes the
// line again.
func requestID(jobID string, seq int64) string {
	return "req_" + strings.TrimPrefix(jobID, "job_") + "_" + strconv.FormatInt(seq, 10)
}

// lineID is the output line's id; it carries the done number, which is how
// a resumed job knows where its files end.
func lineID(done int64) string { return "batch_req_" + strconv.FormatInt(done, 10) }

// parseLineID returns the done number in an output line, or -1.
func parseLineID(line []byte) int64 {
	var l struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(line, &l) != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(l.ID, "batch_req_"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func finishName(f batcher.FinishReason) string {
	switch f {
	case batcher.FinishLength:
		return "length"
	case batcher.FinishContentFilter:
		return "content_filter"
	}
	return "stop"
}

// formatLine renders a finished task as its output line, and reports
// whether it belongs in errors.jsonl.
func formatLine(j *Job, t *Task, created time.Time) ([]byte, bool) {
	rec, err := DecodeRecord(t.Result)
	if err != nil {
		rec = Record{ErrCode: CodeServerError, ErrMessage: "stored result unreadable"}
	}
	l := outputLine{ID: lineID(t.DoneSeq), CustomID: t.CustomID}
	if len(j.Spec.Groups) > 0 || j.Spec.Judge != nil {
		l.Batcher = &outputTags{Item: t.Item, Group: j.GroupName(t.Group), Run: t.Run, Judge: t.Group == GroupJudge,
			Model: t.Model, JudgePrompt: rec.JudgePrompt}
	}
	if t.State != ItemSucceeded {
		l.Error = &outputError{Code: rec.ErrCode, Message: rec.ErrMessage}
		return encode(&l), true
	}
	l.Dispatch, l.Cost = rec.Dispatch, rec.Cost
	usage := usageBody{rec.PromptTokens, rec.CompletionTokens, rec.PromptTokens + rec.CompletionTokens}
	resp := &outputResponse{StatusCode: 200, RequestID: requestID(j.ID, t.Seq)}
	switch {
	case rec.URL == URLEmbeddings || rec.Embedding != nil:
		resp.Body = embeddingBody{Object: "list", Model: t.Model, Usage: usage,
			Data: []embeddingData{{Object: "embedding", Embedding: rec.Embedding}}}
	case rec.URL == URLCompletions:
		text := rec.Text
		resp.Body = chatBody{ID: "cmpl-" + strconv.FormatInt(t.DoneSeq, 10), Object: "text_completion", Created: created.Unix(),
			Model: t.Model, Usage: usage, Choices: []chatChoice{{Text: &text, FinishReason: finishName(rec.FinishReason)}},
			ServiceTier: rec.ServiceTier}
	default: // the whole message, tool calls included, as the front door renders it
		resp.Body = openaiapi.ChatCompletionBody("chatcmpl-"+strconv.FormatInt(t.DoneSeq, 10), t.Model, created.Unix(),
			rec.ServiceTier, rec.Result())
	}
	l.Response = resp
	return encode(&l), false
}
