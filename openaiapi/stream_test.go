package openaiapi_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/batcherhq/batcher/batcher"
)

// streamer is a fakeBackend that streams: "echo: <last message>" (or
// "done: <prompt>") one word a delta. After the first delta it waits for
// gate; a text holding "midfail" fails after the first delta.
type streamer struct {
	*fakeBackend
	gate  chan struct{}
	first chan struct{} // one send per stream's first delta
	ended chan error    // ctx.Err() as each stream returns
}

func newStreamer() *streamer {
	g := make(chan struct{})
	close(g)
	return &streamer{fakeBackend: newFake(), gate: g, first: make(chan struct{}, 64), ended: make(chan error, 64)}
}

func (s *streamer) Stream(ctx context.Context, b *batcher.Batch, w batcher.DeltaWriter) (resp batcher.Response, err error) {
	defer func() { s.ended <- ctx.Err() }()
	r := b.Requests[0]
	text := "done: " + r.Input.Prompt
	if r.Input.Op == batcher.OpChat {
		text = "echo: " + r.Input.Messages[len(r.Input.Messages)-1].Content
	}
	words := strings.SplitAfter(text, " ")
	for i, word := range words {
		if err := w.WriteDelta(&batcher.Delta{Text: word}); err != nil {
			return resp, err
		}
		if i == 0 {
			s.first <- struct{}{}
			select {
			case <-s.gate:
			case <-ctx.Done():
				return resp, ctx.Err()
			}
			if strings.Contains(text, "midfail") {
				return resp, &batcher.UpstreamError{Class: batcher.ClassServer, StatusCode: 502, Message: "cut mid-stream"}
			}
		}
	}
	return batcher.Response{FinishReason: batcher.FinishStop, Usage: batcher.Usage{PromptTokens: 4, CompletionTokens: int32(len(words))}}, nil
}

func newStreamEnv(t *testing.T, s *streamer) *env {
	return newEnv(t, newFake(), withCore(
		batcher.WithBackend(batcher.BackendConfig{Name: "streamer", Backend: s, Retry: batcher.RetryPolicy{MaxRetries: 2}}),
		batcher.WithRoute(batcher.Route{Name: "schat", Op: batcher.OpChat, Backend: "streamer"}),
		batcher.WithRoute(batcher.Route{Name: "scomp", Op: batcher.OpCompletion, Backend: "streamer"}),
	))
}

// TestChatStreamsRealDeltas: through the official SDK, the first chunk
// arrives while the model is still generating (the backend holds after
// its first delta), and the chunks add up to the answer, with the usage
// chunk asked for.
func TestChatStreamsRealDeltas(t *testing.T) {
	s := newStreamer()
	gate := make(chan struct{})
	s.gate = gate
	e := newStreamEnv(t, s)
	stream := e.client.Chat.Completions.NewStreaming(testCtx(t), openai.ChatCompletionNewParams{
		Model:         "schat",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer func() { _ = stream.Close() }()
	var acc openai.ChatCompletionAccumulator
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	// OpenAI's first chunk: the role and empty content alone.
	first := stream.Current()
	if d := first.Choices[0].Delta; d.Content != "" || d.Role != "assistant" || !strings.Contains(first.RawJSON(), `"delta":{"role":"assistant","content":""}`) {
		t.Fatalf("first chunk %s, want the role-only chunk", first.RawJSON())
	}
	acc.AddChunk(first)
	if !stream.Next() {
		t.Fatalf("no second chunk: %v", stream.Err())
	}
	second := stream.Current()
	if d := second.Choices[0].Delta; d.Content != "echo: " || d.Role != "" {
		t.Fatalf("second chunk %s, want the first word without the role", second.RawJSON())
	}
	acc.AddChunk(second)
	close(gate) // the rest of the answer only now
	chunks := 2
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks != 7 { // the role, 4 words, the finish, the usage
		t.Errorf("%d chunks, want 7", chunks)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "echo: one two three" || acc.Choices[0].FinishReason != "stop" || acc.Usage.CompletionTokens != 4 {
		t.Fatalf("accumulated %+v, usage %+v", acc.Choices, acc.Usage)
	}
}

// TestCompletionStreamsRealDeltas: /v1/completions streams one prompt's
// deltas as text_completion chunks.
func TestCompletionStreamsRealDeltas(t *testing.T) {
	e := newStreamEnv(t, newStreamer())
	stream := e.client.Completions.NewStreaming(testCtx(t), openai.CompletionNewParams{
		Model:  "scomp",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("a b")},
	})
	defer func() { _ = stream.Close() }()
	var text strings.Builder
	n := 0
	for stream.Next() {
		ch := stream.Current()
		if ch.Object != "text_completion" || len(ch.Choices) != 1 {
			t.Fatalf("chunk %+v", ch)
		}
		text.WriteString(ch.Choices[0].Text)
		n++
	}
	if err := stream.Err(); err != nil || text.String() != "done: a b" || n != 4 {
		t.Fatalf("%d chunks %q, err %v", n, text.String(), err)
	}
}

// TestChatStreamMidStreamFailure: a failure after the first chunk is an
// error event the SDK reports, not a retry and not [DONE].
func TestChatStreamMidStreamFailure(t *testing.T) {
	s := newStreamer()
	e := newStreamEnv(t, s)
	stream := e.client.Chat.Completions.NewStreaming(testCtx(t), openai.ChatCompletionNewParams{
		Model:    "schat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("midfail please")},
	})
	defer func() { _ = stream.Close() }()
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err == nil || text.String() != "echo: " {
		t.Fatalf("text %q, err %v: want the first word, then an error", text.String(), err)
	}
	if len(s.ended) != 1 {
		t.Fatalf("%d upstream streams, want 1: no retry after a delta", len(s.ended))
	}
}

// TestChatStreamCallerGoneCancelsUpstream: a caller that hangs up
// mid-stream ends the upstream call at once.
func TestChatStreamCallerGoneCancelsUpstream(t *testing.T) {
	s := newStreamer()
	s.gate = make(chan struct{}) // never opened
	e := newStreamEnv(t, s)
	ctx, cancel := context.WithCancel(testCtx(t))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/chat/completions",
		strings.NewReader(`{"model":"schat","stream":true,"messages":[{"role":"user","content":"hang up"}]}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	var line string
	for range 3 { // the role's chunk, a blank line, the first word's chunk
		line, err = br.ReadString('\n')
	}
	if err != nil || !strings.Contains(line, `"echo: "`) {
		t.Fatalf("third line %q, %v", line, err)
	}
	cancel()
	_ = resp.Body.Close()
	if err := <-s.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("upstream ended with %v, want cancelled", err)
	}
}

// TestChatStreamRefusedBeforeAnyDelta: a failure before the first delta
// keeps its HTTP status, as an unstreamed call's.
func TestChatStreamRefusedBeforeAnyDelta(t *testing.T) {
	e := newStreamEnv(t, newStreamer())
	stream := e.client.Chat.Completions.NewStreaming(testCtx(t), openai.ChatCompletionNewParams{
		Model:    "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	})
	defer func() { _ = stream.Close() }()
	for stream.Next() {
		t.Fatal("a chunk from an unknown model")
	}
	if ae := apiError(t, stream.Err()); ae.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", ae.StatusCode)
	}
}

// TestChatStreamUsageNull: for chat and completions, with
// stream_options.include_usage every chunk but the last carries
// "usage":null and the last the usage, as OpenAI streams; without it no
// chunk has a usage field.
func TestChatStreamUsageNull(t *testing.T) {
	e := newStreamEnv(t, newStreamer())
	calls := []struct{ path, body string }{
		{"/chat/completions", `{"model":"schat","stream":true,"messages":[{"role":"user","content":"a b"}]`},
		{"/completions", `{"model":"scomp","stream":true,"prompt":"a b"`},
	}
	for _, call := range calls {
		for _, include := range []bool{true, false} {
			body := call.body
			if include {
				body += `,"stream_options":{"include_usage":true}`
			}
			code, _, out := e.post(t, call.path, body+"}")
			var chunks []string
			for _, line := range strings.Split(out, "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
					chunks = append(chunks, d)
				}
			}
			if code != http.StatusOK || len(chunks) < 3 {
				t.Fatalf("include_usage=%v: %d %s", include, code, out)
			}
			for i, c := range chunks {
				last := i == len(chunks)-1
				switch {
				case !include && strings.Contains(c, `"usage"`):
					t.Errorf("chunk %d without include_usage: %s, want no usage", i, c)
				case include && !last && !strings.Contains(c, `"usage":null`):
					t.Errorf("chunk %d: %s, want \"usage\":null", i, c)
				case include && last && !strings.Contains(c, `"usage":{"prompt_tokens":`):
					t.Errorf("last chunk: %s, want the usage", c)
				}
			}
		}
	}
}
