package llmsim_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/batcherhq/batcher/llmsim"
)

func Example() {
	sim, err := llmsim.New(llmsim.Config{ReplyTokens: 8})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(sim)
	defer srv.Close()
	defer sim.Close()

	body := `{"model":"sim-chat","messages":[{"role":"user","content":"Hello there"}]}`
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	fmt.Println(out.Choices[0].Message.Content)
	fmt.Println(out.Usage.PromptTokens, out.Usage.CompletionTokens)
	// Output:
	// echo: Hello there | request will
	// 10 8
}

func ExampleReply() {
	text, cut := llmsim.Reply("What is a batch?", 4, llmsim.DefaultReplyTokens)
	fmt.Printf("%q %v\n", text, cut)
	// Output:
	// "echo: What is a " true
}
