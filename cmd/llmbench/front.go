package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
	"github.com/batcherhq/batcher/openaiapi"
)

// The front scenario: N single-input embedding calls from W concurrent
// callers using the official OpenAI Go SDK, once through Batcher's
// OpenAI-compatible front door (openaiapi → core → openai backend →
// llmsim), once straight to llmsim.
var (
	frontWorkers = flag.Int("front-workers", 100, "concurrent SDK callers (scenario front)")
	frontRPM     = flag.Int("front-rpm", 0, "llmsim requests per minute for the front scenario (0: none)")
)

func front(o options) error {
	var rows []row
	for _, through := range []bool{true, false} {
		r, err := frontRun(o, through)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	printRows(fmt.Sprintf("OpenAI front door, embeddings: %d single-input SDK calls from %d callers, llmsim %v per call, %d RPM",
		o.nEmbed, *frontWorkers, o.latency, *frontRPM), rows)
	return nil
}

func frontRun(o options, through bool) (row, error) {
	s, err := startSim(llmsim.Config{Latency: o.latency, RPM: *frontRPM, EmbeddingDim: embedDim})
	if err != nil {
		return row{}, err
	}
	defer s.stop()
	base, model := s.url, "sim-embedding"
	var stats func() string // the core's, when through it
	r := row{name: fmt.Sprintf("direct to llmsim, %d SDK callers", *frontWorkers), requests: o.nEmbed}
	if through {
		be, err := openai.New(openai.Config{BaseURL: s.url})
		if err != nil {
			return row{}, err
		}
		defer func() { _ = be.Close() }()
		core, err := batcher.New(
			batcher.WithQueueCapacity(o.nEmbed+1),
			batcher.WithQueueTimeout(30*time.Minute),
			batcher.WithBackend(batcher.BackendConfig{Name: "openai-main", Backend: be, MaxConcurrency: o.concurrency}),
			batcher.WithRoute(batcher.Route{Name: "text-embedding-3-small", Op: batcher.OpEmbedding, Backend: "openai-main", Model: model,
				Batch: batcher.BatchConfig{MaxBatchSize: o.batch, Window: 20 * time.Millisecond}}),
		)
		if err != nil {
			return row{}, err
		}
		defer func() { _ = core.Shutdown(context.Background()) }()
		h, err := openaiapi.New(core)
		if err != nil {
			return row{}, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return row{}, err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		base, model = "http://"+ln.Addr().String()+"/v1", "text-embedding-3-small"
		r.name = fmt.Sprintf("through Batcher's front door, %d SDK callers, batches of up to %d", *frontWorkers, o.batch)
		stats = func() string { return fmt.Sprintf("core: %d dispatches", core.Stats()[0].Calls) }
	}
	tr := &http.Transport{MaxIdleConnsPerHost: *frontWorkers}
	defer tr.CloseIdleConnections()
	// Under an RPM limit both runs' callers retry 429s as the SDK does
	// (waiting the Retry-After the answer names); without one, never.
	retries := 0
	if *frontRPM > 0 {
		retries = 1000
	}
	client := oai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(retries),
		option.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Minute}))
	jobs := make(chan int)
	var failed, wrong atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range *frontWorkers {
		wg.Go(func() {
			for i := range jobs {
				text := embedText(i)
				res, err := client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
					Model: model, Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String(text)},
				})
				if err != nil || len(res.Data) != 1 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err))
					continue
				}
				if !equal64(res.Data[0].Embedding, llmsim.Embedding(text, embedDim)) {
					wrong.Add(1)
				}
			}
		})
	}
	for i := range o.nEmbed {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	r.wall = time.Since(start)
	st := s.Stats()
	r.failed, r.wrong = int(failed.Load()), int(wrong.Load())
	r.calls, r.throttled, r.prompt = st.Embeddings, st.RateLimited, st.PromptTokens
	if stats != nil {
		r.extra = stats()
	}
	if e := firstErr.Load(); e != nil {
		return r, errors.New("a call failed: " + e.(string))
	}
	return r, nil
}

// equal64 compares the SDK's float64s with llmsim's float32s.
func equal64(a []float64, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if float32(a[i]) != b[i] {
			return false
		}
	}
	return true
}
