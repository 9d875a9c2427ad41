package openaiapi_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestConcurrentSafe: many SDK callers at once, each of the three
// operations, every answer its own.
func TestConcurrentSafe(t *testing.T) {
	e := newEnv(t, newFake())
	var wg sync.WaitGroup
	for i := range 48 {
		wg.Go(func() {
			text := fmt.Sprint("caller ", i)
			switch i % 3 {
			case 0:
				c, err := e.client.Chat.Completions.New(testCtx(t), chatParams("chat", text))
				if err != nil || c.Choices[0].Message.Content != "echo: "+text {
					t.Errorf("chat %d: %v", i, err)
				}
			case 1:
				c, err := e.client.Completions.New(testCtx(t), openai.CompletionNewParams{
					Model: "comp", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{text, text + "!"}},
				})
				if err != nil || c.Choices[1].Text != "done: "+text+"!" {
					t.Errorf("completion %d: %v", i, err)
				}
			case 2:
				r, err := e.client.Embeddings.New(testCtx(t), openai.EmbeddingNewParams{
					Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(text)},
				})
				if err != nil || decode(r.Data[0].Embedding) != text {
					t.Errorf("embedding %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
}
