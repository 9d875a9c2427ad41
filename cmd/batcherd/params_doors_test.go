package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// badParam is a generation parameter out of its range, as a gRPC caller
// and an OpenAI caller set it, and the limit every door must name.
type badParam struct {
	field string // the parameter's name, at every door
	set   func(p *batcherv1.GenerationParams)
	json  string // the body's fields
	limit string
}

func badParams() []badParam {
	f := func(v float32) *float32 { return &v }
	i := func(v int32) *int32 { return &v }
	return []badParam{
		{"temperature", func(p *batcherv1.GenerationParams) { p.Temperature = f(5) }, `"temperature": 5`, "must be 0 to 2, got 5"},
		{"top_p", func(p *batcherv1.GenerationParams) { p.TopP = f(1.5) }, `"top_p": 1.5`, "must be greater than 0 and at most 1, got 1.5"},
		{"max_tokens", func(p *batcherv1.GenerationParams) { p.MaxTokens = i(40000) }, `"max_tokens": 40000`, "must be 1 to 32768, got 40000"},
		{"n", func(p *batcherv1.GenerationParams) { p.N = i(9) }, `"n": 9`, "must be 1 to 8, got 9"},
		{"frequency_penalty", func(p *batcherv1.GenerationParams) { p.FrequencyPenalty = f(3) }, `"frequency_penalty": 3`, "must be -2 to 2, got 3"},
		{"top_logprobs", func(p *batcherv1.GenerationParams) { p.Logprobs, p.TopLogprobs = true, i(21) }, `"logprobs": true, "top_logprobs": 21`,
			"must be 0 to 20, got 21"},
	}
}

// TestEveryDoorRefusesParamsOutOfRange: a generation parameter out of its
// range is refused by the core's one rule at every door, naming the
// field and its limit: at once at Submit, SubmitStream, SubmitStreamed
// and the front door, and when the job is created (not when the item
// runs) at CreateJob (items and OpenAI lines, fail_on_invalid making it
// the call's error) and /v1/batches (the line's error line, written at
// creation: it names the model the line was checked against, which a
// refusal when the item runs does not).
func TestEveryDoorRefusesParamsOutOfRange(t *testing.T) {
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--data-dir", t.TempDir())
	defer func() {
		stop()
		<-exit
	}()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	bc, jc := batcherv1.NewBatcherServiceClient(conn), batcherv1.NewJobServiceClient(conn)
	sdk := sdkClient(httpAddr(t, logs), "")
	req := func(bp badParam) *batcherv1.Request {
		r := chatItem("sim-chat")
		r.Id, r.Params = "x", &batcherv1.GenerationParams{}
		bp.set(r.Params)
		return r
	}
	body := func(bp badParam) string {
		return `{"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}], ` + bp.json + `}`
	}
	createJob := func(t *testing.T, items *batcherv1.JobItems) error {
		st, err := jc.CreateJob(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Spec{Spec: &batcherv1.JobSpec{Model: "sim-chat", FailOnInvalid: true}}})
		_ = st.Send(&batcherv1.CreateJobRequest{Kind: &batcherv1.CreateJobRequest_Items{Items: items}})
		_, err = st.CloseAndRecv()
		return err
	}
	grpcCode := func(t *testing.T, err error, code codes.Code, want string) {
		t.Helper()
		if s := status.Convert(err); s.Code() != code || !strings.Contains(s.Message(), want) {
			t.Errorf("got %v, want %v saying %q", err, code, want)
		}
	}
	for _, door := range []struct {
		name  string
		check func(t *testing.T, bp badParam)
	}{
		{"Submit", func(t *testing.T, bp badParam) {
			_, err := bc.Submit(t.Context(), &batcherv1.SubmitRequest{Request: req(bp)})
			grpcCode(t, err, codes.InvalidArgument, "request.params."+bp.field+": "+bp.limit)
		}},
		{"SubmitStream", func(t *testing.T, bp badParam) {
			s, err := bc.SubmitStream(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			_ = s.Send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: req(bp)}})
			_ = s.CloseSend()
			var got error
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				if rj := m.GetRejection(); rj != nil {
					got = status.FromProto(rj.GetError()).Err()
				}
			}
			grpcCode(t, got, codes.InvalidArgument, "request.params."+bp.field+": "+bp.limit)
		}},
		{"SubmitStreamed", func(t *testing.T, bp badParam) {
			r := req(bp)
			if bp.field == "n" || bp.field == "top_logprobs" {
				seven := float32(7)
				r.Params = &batcherv1.GenerationParams{Temperature: &seven} // a streamed request has one choice and no logprobs
				bp.field, bp.limit = "temperature", "must be 0 to 2, got 7"
			}
			s, err := bc.SubmitStreamed(t.Context(), &batcherv1.SubmitStreamedRequest{Request: r})
			if err == nil {
				for err == nil {
					_, err = s.Recv()
				}
			}
			grpcCode(t, err, codes.InvalidArgument, "request.params."+bp.field+": "+bp.limit)
		}},
		{"/v1/chat/completions", func(t *testing.T, bp badParam) {
			resp, err := http.Post("http://"+httpAddr(t, logs)+"/v1/chat/completions", "application/json", strings.NewReader(body(bp)))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var e struct {
				Error struct{ Message, Param string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusBadRequest ||
				e.Error.Param != bp.field || !strings.Contains(e.Error.Message, bp.limit) {
				t.Errorf("got %d %+v, want 400 naming %s: %s", resp.StatusCode, e, bp.field, bp.limit)
			}
		}},
		{"CreateJob items", func(t *testing.T, bp badParam) {
			err := createJob(t, &batcherv1.JobItems{Requests: []*batcherv1.Request{chatItem(""), req(bp)}})
			grpcCode(t, err, codes.InvalidArgument, `requests[1] (id "x"): model "sim-chat": request.params.`+bp.field+": "+bp.limit)
		}},
		{"CreateJob OpenAI lines", func(t *testing.T, bp badParam) {
			err := createJob(t, &batcherv1.JobItems{OpenaiLines: []*batcherv1.OpenAIBatchLine{
				{Line: []byte(batchLine("ok", "/v1/chat/completions", chatBody))},
				{Line: []byte(batchLine("x", "/v1/chat/completions", body(bp)))}}})
			// The line's decoder (the front door's) refuses n and
			// top_logprobs out of range as it reads them, before the
			// model is known: no model in the message then.
			grpcCode(t, err, codes.InvalidArgument, `line 2 (custom_id "x"): `)
			grpcCode(t, err, codes.InvalidArgument, `body.`+bp.field+": "+bp.limit)
		}},
		{"/v1/batches", func(t *testing.T, bp badParam) {
			in := batchLine("ok", "/v1/chat/completions", chatBody) + "\n" + batchLine("x", "/v1/chat/completions", body(bp)) + "\n"
			f, err := sdk.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(in), "in.jsonl", "application/jsonl"),
				Purpose: openai.FilePurposeBatch})
			if err != nil {
				t.Fatal(err)
			}
			b, err := sdk.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
				CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
			if err != nil {
				t.Fatal(err)
			}
			if b = waitBatch(t, sdk, b.ID); b.RequestCounts.Failed != 1 || b.RequestCounts.Completed != 1 {
				t.Fatalf("batch counts %+v, want 1 completed, 1 failed", b.RequestCounts)
			}
			resp, err := sdk.Files.Content(t.Context(), b.ErrorFileID)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var l outLine
			if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
				t.Fatal(err)
			}
			want := `line 2: model "sim-chat": body.` + bp.field + ": " + bp.limit
			if bp.field == "n" || bp.field == "top_logprobs" { // refused by the line's decoder, as above
				want = `line 2: body.` + bp.field + ": " + bp.limit
			}
			if l.CustomID != "x" || l.Error == nil || l.Error.Message != want {
				t.Errorf("error line %+v (%+v), want %q", l, l.Error, want)
			}
		}},
	} {
		t.Run(door.name, func(t *testing.T) {
			for _, bp := range badParams() {
				t.Run(bp.field, func(t *testing.T) { door.check(t, bp) })
			}
		})
	}
}
