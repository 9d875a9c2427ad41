package openaiapi_test

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/openaiapi"
)

func TestChat(t *testing.T) {
	e := newEnv(t, newFake())
	var resp *http.Response
	c, err := e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model:    "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello")},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Content != "echo: hello" || c.Choices[0].FinishReason != "stop" {
		t.Errorf("choices %+v, want one \"echo: hello\" that stopped", c.Choices)
	}
	if c.Object != "chat.completion" || c.Model != "chat" || !strings.HasPrefix(c.ID, "chatcmpl-") {
		t.Errorf("object %q model %q id %q", c.Object, c.Model, c.ID)
	}
	if c.Usage.PromptTokens != 5 || c.Usage.CompletionTokens != 2 || c.Usage.TotalTokens != 7 {
		t.Errorf("usage %+v, want 5+2=7", c.Usage)
	}
	if got := resp.Header.Get("X-Request-Id"); got != c.ID {
		t.Errorf("X-Request-Id %q, want %q", got, c.ID)
	}
	if resp.Header.Get("X-Batcher-Batch-Size") != "1" {
		t.Errorf("X-Batcher-Batch-Size %q, want 1", resp.Header.Get("X-Batcher-Batch-Size"))
	}
}

func TestChatContentParts(t *testing.T) {
	e := newEnv(t, newFake())
	c, err := e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model: "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("one"), openai.TextContentPart("two"),
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Choices[0].Message.Content; got != "echo: one\ntwo" {
		t.Errorf("content %q, want the parts joined", got)
	}
	_, err = e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
		Model: "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("look"), openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/a.png"}),
		})},
	})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "messages[0].content[1].image_url" || !strings.Contains(ae.Message, "not supported") {
		t.Errorf("image part: %d param %q, want 400 naming messages[0].content[1].image_url: this backend takes no images", ae.StatusCode, ae.Param)
	}
}

func TestChatStreaming(t *testing.T) {
	e := newEnv(t, newFake())
	stream := e.client.Chat.Completions.NewStreaming(testCtx(t), openai.ChatCompletionNewParams{
		Model:         "chat",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream me")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		ch := stream.Current()
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", ch.Object)
		}
		acc.AddChunk(ch)
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Close(); err != nil {
		t.Fatal(err)
	}
	if chunks != 4 {
		t.Errorf("%d chunks, want 4 (role, content, finish, usage)", chunks)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "echo: stream me" || acc.Choices[0].FinishReason != "stop" {
		t.Errorf("accumulated %+v", acc.Choices)
	}
	if acc.Usage.TotalTokens != int64(len("stream me"))+2 {
		t.Errorf("usage %+v", acc.Usage)
	}
}

// TestChatStreamingWire checks the bytes of the stream: data lines, ending
// with [DONE].
func TestChatStreamingWire(t *testing.T) {
	e := newEnv(t, newFake())
	code, h, body := e.post(t, "/chat/completions", `{"model":"chat","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if code != http.StatusOK || h.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %q: %s", code, h.Get("Content-Type"), body)
	}
	events := strings.Split(strings.TrimSpace(body), "\n\n")
	if len(events) != 4 || events[3] != "data: [DONE]" {
		t.Fatalf("events %q: want three chunks and [DONE]", events)
	}
	// OpenAI's first chunk holds the role and empty content alone.
	if !strings.Contains(events[0], `"delta":{"role":"assistant","content":""}`) || !strings.Contains(events[1], `"delta":{"content":"echo: x"}`) ||
		!strings.Contains(events[2], `"finish_reason":"stop"`) {
		t.Errorf("events %q", events)
	}
}

func TestCompletions(t *testing.T) {
	e := newEnv(t, newFake())
	c, err := e.client.Completions.New(testCtx(t), openai.CompletionNewParams{
		Model:  "comp",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Text != "done: once upon" || c.Choices[0].FinishReason != "stop" {
		t.Errorf("choices %+v", c.Choices)
	}
	prompts := []string{"a", "bb", "ccc"}
	c, err = e.client.Completions.New(testCtx(t), openai.CompletionNewParams{
		Model:  "comp",
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: prompts},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(c.Choices))
	}
	for i, ch := range c.Choices {
		if ch.Index != int64(i) || ch.Text != "done: "+prompts[i] {
			t.Errorf("choice %d: %+v", i, ch)
		}
	}
	if c.Usage.PromptTokens != 6 || c.Usage.CompletionTokens != 6 {
		t.Errorf("usage %+v, want 6 prompt, 6 completion", c.Usage)
	}

	stream := e.client.Completions.NewStreaming(testCtx(t), openai.CompletionNewParams{
		Model: "comp", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("s")},
	})
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Text)
		}
	}
	if err := stream.Err(); err != nil || text.String() != "done: s" {
		t.Errorf("stream: %q, %v", text.String(), err)
	}
	_ = stream.Close()
}

func TestEmbeddings(t *testing.T) {
	e := newEnv(t, newFake())
	r, err := e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
		Model: "embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Data) != 1 || !slices.Equal(r.Data[0].Embedding, []float64{'h', 'i'}) || r.Usage.PromptTokens != 2 {
		t.Errorf("got %+v", r)
	}
}

// TestEmbeddingsArray: an array of 100 is split into items that batch
// (here, exactly ten batches of ten), then reassembled in order.
func TestEmbeddingsArray(t *testing.T) {
	f := newFake()
	e := newEnv(t, f, withBatch(batcher.BatchConfig{MaxBatchSize: 10, MinBatchSize: 10, Window: time.Hour, MaxWait: time.Hour}))
	inputs := make([]string, 100)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("input %03d", i)
	}
	r, err := e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
		Model: "embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Data) != 100 {
		t.Fatalf("%d embeddings, want 100", len(r.Data))
	}
	for i, d := range r.Data {
		if d.Index != int64(i) || !slices.Equal(d.Embedding, floats(embedOf(inputs[i]))) {
			t.Fatalf("item %d: index %d, embedding of %q", i, d.Index, decode(d.Embedding))
		}
	}
	if n := f.calls.Load(); n != 10 {
		t.Errorf("%d upstream calls, want 10 batches of 10", n)
	}
	if r.Usage.PromptTokens != 900 {
		t.Errorf("usage %d, want 900", r.Usage.PromptTokens)
	}
}

// TestEmbeddingsBatchAcrossCallers: single inputs from different callers
// share batches.
func TestEmbeddingsBatchAcrossCallers(t *testing.T) {
	f := newFake()
	e := newEnv(t, f, withBatch(batcher.BatchConfig{MaxBatchSize: 4, MinBatchSize: 4, Window: time.Hour, MaxWait: time.Hour}))
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
				Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(fmt.Sprint("caller ", i))},
			})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d upstream calls for 8 callers, want 2 batches of 4", n)
	}
}

func TestEmbeddingsFormats(t *testing.T) {
	e := newEnv(t, newFake())
	code, _, body := e.post(t, "/embeddings", `{"model":"embed","input":"ab","encoding_format":"base64"}`)
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	want := make([]byte, 8)
	binary.LittleEndian.PutUint32(want, math.Float32bits('a'))
	binary.LittleEndian.PutUint32(want[4:], math.Float32bits('b'))
	if !strings.Contains(body, `"embedding":"`+base64.StdEncoding.EncodeToString(want)+`"`) {
		t.Errorf("base64 body %s", body)
	}
	r, err := e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
		Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("abcd")}, Dimensions: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Data[0].Embedding; len(v) != 2 || math.Abs(v[0]*v[0]+v[1]*v[1]-1) > 1e-6 {
		t.Errorf("dimensions 2: %v, want two at unit length", v)
	}
	_, err = e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
		Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}},
	})
	if ae := apiError(t, err); ae.StatusCode != http.StatusBadRequest || ae.Param != "input" {
		t.Errorf("token input: %d param %q, want 400 naming input", ae.StatusCode, ae.Param)
	}
}

func TestModels(t *testing.T) {
	e := newEnv(t, newFake())
	page, err := e.client.Models.List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.Object != "model" || m.OwnedBy != "batcher" {
			t.Errorf("model %+v", m)
		}
	}
	if !slices.Equal(ids, []string{"chat", "comp", "embed"}) {
		t.Errorf("models %v, want the three routes in order", ids)
	}
	m, err := e.client.Models.Get(testCtx(t), "embed")
	if err != nil || m.ID != "embed" {
		t.Errorf("get embed: %+v, %v", m, err)
	}
	_, err = e.client.Models.Get(testCtx(t), "nope")
	if ae := apiError(t, err); ae.StatusCode != http.StatusNotFound || ae.Code != "model_not_found" {
		t.Errorf("get nope: %d %q, want 404 model_not_found", ae.StatusCode, ae.Code)
	}
}

// TestPriority: service_tier and the header reach the core's request.
func TestPriority(t *testing.T) {
	for _, tc := range []struct {
		tier   openai.ChatCompletionNewParamsServiceTier
		header string
		want   batcher.Priority
	}{
		{"", "", batcher.PriorityNormal},
		{"default", "", batcher.PriorityNormal},
		{"priority", "", batcher.PriorityHigh},
		{"flex", "", batcher.PriorityLow},
		{"flex", "urgent", batcher.PriorityUrgent},
		{"", "Deferrable", batcher.PriorityDeferrable},
	} {
		f := newFake()
		e := newEnv(t, f)
		var opts []option.RequestOption
		if tc.header != "" {
			opts = append(opts, option.WithHeader("X-Batcher-Priority", tc.header))
		}
		_, err := e.client.Chat.Completions.New(testCtx(t), openai.ChatCompletionNewParams{
			Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("p")}, ServiceTier: tc.tier,
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		got := f.prios
		f.mu.Unlock()
		if !slices.Equal(got, []batcher.Priority{tc.want}) {
			t.Errorf("tier %q header %q: priorities %v, want %v", tc.tier, tc.header, got, tc.want)
		}
	}
}

func floats(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = float64(f)
	}
	return out
}

func decode(v []float64) string {
	b := make([]byte, len(v))
	for i, f := range v {
		b[i] = byte(f)
	}
	return string(b)
}

// TestMaxInputsOfOne: a front door configured for one input a call
// (WithMaxInputs(1)) refuses two by its limit, on both endpoints that
// take an array, not with a batch line's message ("a batch line holds one
// item"), which would send the caller looking for a batch file it never
// wrote.
func TestMaxInputsOfOne(t *testing.T) {
	e := newEnv(t, newFake(), withHandler(openaiapi.WithMaxInputs(1)))
	for _, tc := range []struct{ path, body, field string }{
		{"/completions", `{"model":"comp","prompt":["a","b"]}`, "prompt"},
		{"/embeddings", `{"model":"embed","input":["a","b"]}`, "input"},
	} {
		code, _, body := e.post(t, tc.path, tc.body)
		const want = "must hold at most 1 items, got 2"
		if code != http.StatusBadRequest || !strings.Contains(body, want) || !strings.Contains(body, `"param":"`+tc.field+`"`) {
			t.Errorf("%s with two inputs: %d %s, want 400 %q", tc.path, code, body, want)
		}
	}
}
