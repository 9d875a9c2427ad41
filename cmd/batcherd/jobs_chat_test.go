package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/jobs/storetest"
)

// The chat surface through a job, the same at every job door: CreateJob's
// items (batcher.v1.Request), CreateJob's OpenAI lines, and /v1/batches.
// A tool-call request, a strict JSON schema request and an image request
// each run through a job against the embedded sim, and each results.jsonl
// line is OpenAI's batch output shape with the whole message; a field the
// model's backend cannot honour is refused naming it and the line.

const (
	weatherParams = `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"],"additionalProperties":false}`
	answerSchema  = `{"type":"object","properties":{"answer":{"type":"string"},"score":{"type":"integer"}},"required":["answer","score"],"additionalProperties":false}`
	imageURL      = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

// chatLines are the OpenAI batch lines of the three requests and the two
// that must be refused: presence_penalty, which the sim does not honour,
// and tools on a completions line.
var chatLines = []string{
	`{"custom_id":"tool","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-chat","messages":[{"role":"user","content":"weather in Paris?"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"the forecast","parameters":` + weatherParams + `,"strict":true}}],` +
		`"tool_choice":{"type":"function","function":{"name":"get_weather"}}}}`,
	`{"custom_id":"schema","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-chat","messages":[{"role":"user","content":"rate this"}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"rating","schema":` + answerSchema + `,"strict":true}}}}`,
	`{"custom_id":"image","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-chat","messages":[{"role":"user","content":[` +
		`{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"` + imageURL + `","detail":"low"}}]}]}}`,
	`{"custom_id":"penalty","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-chat","messages":[{"role":"user","content":"x"}],"presence_penalty":0.5}}`,
}

// chatRequests are the same as batcher.v1.Requests, and tools on a
// completion route for the refusal.
func chatRequests(t *testing.T) []*batcherv1.Request {
	t.Helper()
	st := func(s string) *structpb.Struct {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		v, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	chat := func(msgs ...*batcherv1.ChatMessage) *batcherv1.Request_Chat {
		return &batcherv1.Request_Chat{Chat: &batcherv1.ChatInput{Messages: msgs}}
	}
	half := float32(0.5)
	return []*batcherv1.Request{
		{Id: "tool", Model: "sim-chat", Input: chat(&batcherv1.ChatMessage{Role: "user", Content: "weather in Paris?"}),
			Tools:      []*batcherv1.Tool{{Name: "get_weather", Description: "the forecast", Parameters: st(weatherParams), Strict: true}},
			ToolChoice: &batcherv1.ToolChoice{Choice: &batcherv1.ToolChoice_Function{Function: "get_weather"}}},
		{Id: "schema", Model: "sim-chat", Input: chat(&batcherv1.ChatMessage{Role: "user", Content: "rate this"}),
			ResponseFormat: &batcherv1.ResponseFormat{Type: batcherv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, Name: "rating",
				Schema: st(answerSchema), Strict: true}},
		{Id: "image", Model: "sim-chat", Input: chat(&batcherv1.ChatMessage{Role: "user", Parts: []*batcherv1.ContentPart{
			{Part: &batcherv1.ContentPart_Text{Text: "what is this?"}},
			{Part: &batcherv1.ContentPart_Image{Image: &batcherv1.ImagePart{Url: imageURL, Detail: "low"}}}}})},
		{Id: "penalty", Model: "sim-chat", Input: chat(&batcherv1.ChatMessage{Role: "user", Content: "x"}),
			Params: &batcherv1.GenerationParams{PresencePenalty: &half}},
		{Id: "completion-tools", Model: "sim-text", Input: &batcherv1.Request_Completion{Completion: &batcherv1.CompletionInput{Prompt: "x"}},
			Tools: []*batcherv1.Tool{{Name: "get_weather", Parameters: st(weatherParams)}}},
	}
}

// outLine is an output line as OpenAI's Batch API writes it.
type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int    `json:"status_code"`
		RequestID  string `json:"request_id"`
		Body       struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Index   int `json:"index"`
				Message struct {
					Role      string  `json:"role"`
					Content   *string `json:"content"`
					Refusal   *string `json:"refusal"`
					ToolCalls []struct {
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			} `json:"usage"`
		} `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func parseOut(t *testing.T, data []byte) map[string]outLine {
	t.Helper()
	out := map[string]outLine{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("output line %s: %v", sc.Bytes(), err)
		}
		if _, dup := out[l.CustomID]; dup {
			t.Fatalf("custom_id %q twice", l.CustomID)
		}
		out[l.CustomID] = l
	}
	return out
}

// checkChatResults checks the three answers field by field, and the
// refusals, each naming the field.
func checkChatResults(t *testing.T, results, errs map[string]outLine, refused map[string]string) {
	t.Helper()
	if len(results) != 3 {
		t.Errorf("%d results, want 3: %v", len(results), results)
	}
	for _, id := range []string{"tool", "schema", "image"} {
		l, ok := results[id]
		if !ok || l.Response == nil || l.Error != nil {
			t.Errorf("%s: no answer: %+v", id, l)
			continue
		}
		r := l.Response
		b := &r.Body
		if !strings.HasPrefix(l.ID, "batch_req_") || r.StatusCode != http.StatusOK || r.RequestID == "" || b.Object != "chat.completion" ||
			b.Model != "sim-chat" || len(b.Choices) != 1 || b.Choices[0].Index != 0 || b.Choices[0].Message.Role != "assistant" {
			t.Errorf("%s: the line is not a chat.completion batch output line: %+v", id, l)
			continue
		}
		if u := b.Usage; u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("%s: usage %+v", id, u)
		}
		m := &b.Choices[0].Message
		if m.Refusal != nil {
			t.Errorf("%s: refusal %q", id, *m.Refusal)
		}
		switch id {
		case "tool":
			if b.Choices[0].FinishReason != "tool_calls" || m.Content != nil || len(m.ToolCalls) != 1 {
				t.Errorf("tool: finish %q, content %v, %d tool calls; want tool_calls, null, 1", b.Choices[0].FinishReason, m.Content, len(m.ToolCalls))
				continue
			}
			c := m.ToolCalls[0]
			var args map[string]any
			if c.ID == "" || c.Type != "function" || c.Function.Name != "get_weather" || json.Unmarshal([]byte(c.Function.Arguments), &args) != nil {
				t.Errorf("tool: call %+v", c)
				continue
			}
			_, ok1 := args["city"].(string)
			days, ok2 := args["days"].(float64)
			if len(args) != 2 || !ok1 || !ok2 || days != float64(int64(days)) {
				t.Errorf("tool: arguments %s do not validate against the tool's parameters", c.Function.Arguments)
			}
		case "schema":
			var v map[string]any
			if b.Choices[0].FinishReason != "stop" || m.Content == nil || len(m.ToolCalls) != 0 || json.Unmarshal([]byte(*m.Content), &v) != nil {
				t.Errorf("schema: finish %q, content %v, tool calls %v", b.Choices[0].FinishReason, m.Content, m.ToolCalls)
				continue
			}
			_, ok1 := v["answer"].(string)
			score, ok2 := v["score"].(float64)
			if len(v) != 2 || !ok1 || !ok2 || score != float64(int64(score)) {
				t.Errorf("schema: %s does not validate against the schema", *m.Content)
			}
		case "image":
			if b.Choices[0].FinishReason != "stop" || m.Content == nil || *m.Content == "" || len(m.ToolCalls) != 0 {
				t.Errorf("image: finish %q, content %v, tool calls %v", b.Choices[0].FinishReason, m.Content, m.ToolCalls)
			}
		}
	}
	if len(errs) != len(refused) {
		t.Errorf("%d error lines, want %d: %+v", len(errs), len(refused), errs)
	}
	for id, want := range refused {
		l, ok := errs[id]
		if !ok || l.Response != nil || l.Error == nil || l.Error.Code != jobs.CodeInvalidRequest || !strings.Contains(l.Error.Message, want) {
			t.Errorf("%s: error line %+v, want invalid_request naming %q", id, l, want)
		}
	}
}

func TestJobDoorsCarryTheChatSurface(t *testing.T) {
	cfg := writeConfig(t, `
backends:
  - {name: sim, type: sim}
routes:
  - {name: sim-chat, operation: chat, backend: sim}
  - {name: sim-text, operation: completion, backend: sim}
`)
	// Each door names the field as its caller wrote it.
	const (
		penaltyItem = `request.params.presence_penalty: not supported by this model's backend`
		penaltyLine = `body.presence_penalty: not supported by this model's backend`
	)
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dataDir := t.TempDir()
			args := []string{"--config", cfg, "--listen=127.0.0.1:0", "--data-dir", dataDir}
			if store == "postgres" {
				args = append(args, "--job-store", "postgres", "--postgres-dsn", storetest.PostgresSchema(t))
			}
			addr, stop, exit, logs := startInProcess(t, args...)
			defer func() {
				stop()
				<-exit
			}()
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			jc := batcherv1.NewJobServiceClient(conn)

			// createJob sends items over CreateJob, waits for the end, and
			// returns the job's two output files.
			createJob := func(t *testing.T, items *batcherv1.JobItems) (results, errs []byte) {
				t.Helper()
				st, err := jc.CreateJob(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{Name: "chat"}}}); err != nil {
					t.Fatal(err)
				}
				if err := st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: items}}); err != nil {
					t.Fatal(err)
				}
				resp, err := st.CloseAndRecv()
				if err != nil {
					t.Fatalf("CreateJob: %v\n%s", err, logs)
				}
				id := resp.GetJob().GetId()
				if last := watchUntil(t, jc, id, terminal); last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED {
					t.Fatalf("the job ended %v", last)
				}
				// ListJobResults (batcherctl jobs results) answers with the
				// whole message too, as Submit does.
				rs, err := jc.ListJobResults(t.Context(), &batcherv1.ListJobResultsRequest{Id: id})
				if err != nil {
					t.Fatal(err)
				}
				calls := 0
				for {
					r, err := rs.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatalf("ListJobResults: %v", err)
					}
					if res := r.GetResult(); res.GetCustomId() == "tool" {
						m := res.GetCompletion().GetMessage()
						if m.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_TOOL_CALLS || len(m.GetToolCalls()) != 1 ||
							m.GetToolCalls()[0].GetName() != "get_weather" || !json.Valid([]byte(m.GetToolCalls()[0].GetArguments())) {
							t.Errorf("ListJobResults: the tool call is missing: %v", res)
						}
						calls++
					}
				}
				if calls != 1 {
					t.Errorf("ListJobResults: %d results for custom_id tool, want 1", calls)
				}
				dir := jobs.JobDir(dataDir, id)
				var rerr, eerr error
				results, rerr = os.ReadFile(filepath.Join(dir, jobs.ResultsFile))
				errs, eerr = os.ReadFile(filepath.Join(dir, jobs.ErrorsFile))
				if rerr != nil || eerr != nil {
					t.Fatal(rerr, eerr)
				}
				return results, errs
			}

			for _, door := range []struct {
				name    string
				run     func(t *testing.T) (results, errs []byte)
				refused map[string]string
			}{
				{"CreateJob items", func(t *testing.T) ([]byte, []byte) {
					return createJob(t, &batcherv1.JobItems{Requests: chatRequests(t)})
				}, map[string]string{"penalty": penaltyItem,
					"completion-tools": `model "sim-text": request.tools: only chat routes take tools`}},
				{"CreateJob openai_lines", func(t *testing.T) ([]byte, []byte) {
					items := &batcherv1.JobItems{}
					lines := append(chatLines[:len(chatLines):len(chatLines)],
						`{"custom_id":"completion-tools","method":"POST","url":"/v1/completions","body":{"model":"sim-text","prompt":"x","tools":[]}}`)
					for _, l := range lines {
						items.OpenaiLines = append(items.OpenaiLines, &batcherv1.OpenAIBatchLine{Line: []byte(l)})
					}
					return createJob(t, items)
				}, map[string]string{"penalty": penaltyLine, "completion-tools": "body.tools: is not a parameter Batcher serves on /v1/completions"}},
				{"/v1/batches", func(t *testing.T) ([]byte, []byte) {
					c := sdkClient(httpAddr(t, logs), "")
					f, err := c.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(strings.Join(chatLines, "\n")+"\n"),
						"in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
					if err != nil {
						t.Fatalf("upload: %v", err)
					}
					b, err := c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
						CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
					if err != nil {
						t.Fatalf("create: %v", err)
					}
					if b = waitBatch(t, c, b.ID); b.Status != openai.BatchStatusCompleted {
						t.Fatalf("batch ended %s", b.Status)
					}
					read := func(id string) []byte {
						resp, err := c.Files.Content(t.Context(), id)
						if err != nil {
							t.Fatalf("file %s: %v", id, err)
						}
						defer func() { _ = resp.Body.Close() }()
						data, err := io.ReadAll(resp.Body)
						if err != nil {
							t.Fatal(err)
						}
						return data
					}
					return read(b.OutputFileID), read(b.ErrorFileID)
				}, map[string]string{"penalty": penaltyLine}},
			} {
				t.Run(door.name, func(t *testing.T) {
					results, errs := door.run(t)
					checkChatResults(t, parseOut(t, results), parseOut(t, errs), door.refused)
					if t.Failed() {
						t.Logf("results:\n%s\nerrors:\n%s", results, errs)
					}
				})
			}
		})
	}
}
