// Command llmbench measures what Batcher saves against an OpenAI-compatible
// upstream, on loopback only: it starts a fresh in-process llmsim for each
// run, sends the workload and prints a Markdown table of upstream calls,
// 429s, tokens and wall time.
//
// Scenarios:
//   - embeddings: N single-input embedding requests through Batcher (the
//     openai backend's native batches), against the same N requests sent
//     one per call straight to llmsim by a client that honours 429s;
//   - chat: M short chat prompts through Batcher, packed against fan-out.
//
// Usage:
//
//	go run ./cmd/llmbench -scenario all
//	go run ./cmd/llmbench -scenario embeddings -direct=false
//
// The direct baseline at 600 RPM takes about (N-600)/10 seconds: some 16
// minutes for N = 10,000.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/backend/openai"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/llmsim"
)

// usage is what -h prints before the flags.
const usage = `Usage: llmbench [flags]

llmbench measures what Batcher saves against an OpenAI-compatible upstream,
on loopback only: for each run it starts a fresh in-process llmsim (with the
latency and RPM limit the flags set), sends the workload and prints a
Markdown table of upstream calls, 429s, tokens and wall time. Scenarios:
embeddings (single-input requests through Batcher, which sends them as
native batches, against the same requests sent one per call straight to
llmsim), chat (short prompts through Batcher, fanned out against packed
into one call), all (both), and front (the official OpenAI Go SDK through
Batcher's OpenAI-compatible front door against straight to llmsim; not in
all). The direct embeddings baseline at 600 RPM takes about (N-600)/10
seconds: some 16 minutes for the default N of 10,000.

Examples:
  # Every scenario with the defaults (the direct baseline takes a while)
  llmbench -scenario all

  # Embeddings through Batcher only, 2,000 requests, no direct baseline
  llmbench -scenario embeddings -n-embed 2000 -direct=false

  # Chat packing with an upstream 50 ms away and no RPM limit
  llmbench -scenario chat -latency 50ms -chat-rpm 0

  # From a checkout, without building
  go run ./cmd/llmbench -scenario front -front-workers 50

Flags:
`

// printUsage writes usage and the flags to the flag package's output.
func printUsage() {
	_, _ = fmt.Fprint(flag.CommandLine.Output(), usage)
	flag.PrintDefaults()
}

type options struct {
	scenario      string
	nEmbed        int
	nChat         int
	latency       time.Duration
	perToken      time.Duration
	rpm           int
	batch         int
	packItems     int
	concurrency   int
	direct        bool
	directWorkers int
	chatRPMs      string
}

func main() {
	var o options
	flag.StringVar(&o.scenario, "scenario", "all", "embeddings, chat, all, or front (the OpenAI front door; not in all)")
	flag.IntVar(&o.nEmbed, "n-embed", 10000, "embedding requests")
	flag.IntVar(&o.nChat, "n-chat", 1000, "chat requests")
	flag.DurationVar(&o.latency, "latency", 20*time.Millisecond, "llmsim base latency per call")
	flag.DurationVar(&o.perToken, "per-token", time.Millisecond, "llmsim latency per generated token (chat)")
	flag.IntVar(&o.rpm, "rpm", 600, "llmsim requests per minute (embeddings)")
	flag.StringVar(&o.chatRPMs, "chat-rpm", "600,0", "llmsim requests per minute for the chat runs, comma-separated (0: none)")
	flag.IntVar(&o.batch, "batch", 100, "embedding route's max batch size")
	flag.IntVar(&o.packItems, "pack-items", 10, "chat requests per batch and per pack")
	flag.IntVar(&o.concurrency, "concurrency", 8, "Batcher's max concurrent dispatches to the backend")
	flag.BoolVar(&o.direct, "direct", true, "run the one-call-per-request embeddings baseline")
	flag.IntVar(&o.directWorkers, "direct-workers", 32, "concurrent callers of the direct baseline")
	flag.Usage = printUsage
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "llmbench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	fmt.Printf("llmbench: GOMAXPROCS-bound run on loopback; llmsim latency %v, per token %v\n\n", o.latency, o.perToken)
	if o.scenario == "all" || o.scenario == "embeddings" {
		if err := embeddings(o); err != nil {
			return err
		}
	}
	if o.scenario == "all" || o.scenario == "chat" {
		if err := chat(o); err != nil {
			return err
		}
	}
	if o.scenario == "front" {
		return front(o)
	}
	return nil
}

// sim serves a fresh llmsim on a loopback port.
type sim struct {
	*llmsim.Server
	srv *http.Server
	url string
}

func startSim(cfg llmsim.Config) (*sim, error) {
	s, err := llmsim.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &sim{Server: s, srv: srv, url: "http://" + ln.Addr().String() + "/v1"}, nil
}

func (s *sim) stop() {
	s.Close()
	_ = s.srv.Close()
}

type row struct {
	name               string
	requests, failed   int
	calls, throttled   int64
	prompt, completion int64
	resent             int64
	wall               time.Duration
	wrong              int
	extra              string
}

func printRows(title string, rows []row) {
	fmt.Printf("### %s\n\n", title)
	fmt.Println("| run | requests | failed | wrong | upstream calls | 429s | prompt tokens | completion tokens | re-sent singly | wall time |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %v |\n", r.name, r.requests, r.failed, r.wrong, r.calls, r.throttled,
			r.prompt, r.completion, r.resent, r.wall.Round(time.Millisecond))
	}
	fmt.Println()
	for _, r := range rows {
		if r.extra != "" {
			fmt.Printf("- %s: %s\n", r.name, r.extra)
		}
	}
	fmt.Println()
}

const embedDim = 64

func embedText(i int) string {
	return "document " + strconv.Itoa(i) + ": the quick brown fox jumps over the lazy dog"
}

func embeddings(o options) error {
	var rows []row
	for _, v := range []struct {
		name    string
		coreRPM int
	}{
		{fmt.Sprintf("Batcher, batches of %d, no RPM budget (follows x-ratelimit headers)", o.batch), 0},
		{fmt.Sprintf("Batcher, batches of %d, rpm budget %d", o.batch, o.rpm), o.rpm},
	} {
		r, err := embedThroughBatcher(o, v.name, v.coreRPM)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	if o.direct {
		r, err := embedDirect(o)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	printRows(fmt.Sprintf("Embeddings: %d single-input requests, llmsim %v per call, %d RPM", o.nEmbed, o.latency, o.rpm), rows)
	return nil
}

func embedThroughBatcher(o options, name string, coreRPM int) (row, error) {
	s, err := startSim(llmsim.Config{Latency: o.latency, RPM: o.rpm, EmbeddingDim: embedDim})
	if err != nil {
		return row{}, err
	}
	defer s.stop()
	be, err := openai.New(openai.Config{BaseURL: s.url})
	if err != nil {
		return row{}, err
	}
	defer func() { _ = be.Close() }()
	core, err := batcher.New(
		batcher.WithQueueCapacity(o.nEmbed+1),
		batcher.WithQueueTimeout(30*time.Minute),
		batcher.WithBackend(batcher.BackendConfig{Name: "openai-main", Backend: be, MaxConcurrency: o.concurrency, RPM: coreRPM}),
		batcher.WithRoute(batcher.Route{Name: "text-embedding-3-small", Op: batcher.OpEmbedding, Backend: "openai-main", Model: "sim-embedding",
			Batch: batcher.BatchConfig{MaxBatchSize: o.batch, Window: 20 * time.Millisecond}}),
	)
	if err != nil {
		return row{}, err
	}
	r := row{name: name, requests: o.nEmbed}
	var failed, wrong atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range o.nEmbed {
		wg.Go(func() {
			text := embedText(i)
			res, err := core.Do(context.Background(), &batcher.Request{Route: "text-embedding-3-small", Priority: batcher.PriorityNormal,
				Input: batcher.Input{Op: batcher.OpEmbedding, Text: text}})
			if err != nil {
				failed.Add(1)
				return
			}
			if !equal(res.Embedding, llmsim.Embedding(text, embedDim)) {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	r.wall = time.Since(start)
	if err := core.Shutdown(context.Background()); err != nil {
		return row{}, err
	}
	st := s.Stats()
	r.failed, r.wrong = int(failed.Load()), int(wrong.Load())
	r.calls, r.throttled, r.prompt = st.Embeddings, st.RateLimited, st.PromptTokens
	cs := core.Stats()[0]
	r.extra = fmt.Sprintf("core: %d dispatches, waits %v, 429s seen %d", cs.Calls, cs.Waits, cs.RateLimited)
	return r, nil
}

// embedDirect sends one call per request, as a client without Batcher
// would, honouring 429s by waiting their Retry-After and trying again.
func embedDirect(o options) (row, error) {
	s, err := startSim(llmsim.Config{Latency: o.latency, RPM: o.rpm, EmbeddingDim: embedDim})
	if err != nil {
		return row{}, err
	}
	defer s.stop()
	tr := &http.Transport{MaxIdleConnsPerHost: o.directWorkers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	r := row{name: fmt.Sprintf("direct, one call per request, %d workers, waits Retry-After on 429", o.directWorkers), requests: o.nEmbed}
	jobs := make(chan int)
	var failed, wrong atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.directWorkers {
		wg.Go(func() {
			for i := range jobs {
				if err := directOne(client, s.url, i, &wrong); err != nil {
					failed.Add(1)
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
	return r, nil
}

func directOne(client *http.Client, url string, i int, wrong *atomic.Int64) error {
	text := embedText(i)
	body, _ := json.Marshal(map[string]any{"model": "sim-embedding", "input": text})
	for attempt := 0; attempt < 1000; attempt++ {
		resp, err := client.Post(url+"/embeddings", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			ms, _ := strconv.ParseFloat(resp.Header.Get("retry-after-ms"), 64)
			t := time.NewTimer(time.Duration(max(ms, 1) * float64(time.Millisecond)))
			<-t.C
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		var out struct {
			Data []struct{ Embedding []float32 }
		}
		if err := json.Unmarshal(data, &out); err != nil || len(out.Data) != 1 {
			return errors.New("bad body")
		}
		if !equal(out.Data[0].Embedding, llmsim.Embedding(text, embedDim)) {
			wrong.Add(1)
		}
		return nil
	}
	return errors.New("gave up")
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// chatSystem is a shared system prompt of an ordinary size.
const chatSystem = "You are a helpful assistant for a travel booking site. Answer the customer's question in one short, friendly sentence. Do not make up prices or dates."

func chatPrompt(i int) string {
	return fmt.Sprintf("Question %d: can I change the date of booking #%d?", i, 10000+i)
}

func chat(o options) error {
	var rpms []int
	for _, f := range bytes.Split([]byte(o.chatRPMs), []byte(",")) {
		n, err := strconv.Atoi(string(bytes.TrimSpace(f)))
		if err != nil || n < 0 {
			return fmt.Errorf("-chat-rpm: bad value %q", f)
		}
		rpms = append(rpms, n)
	}
	for _, rpm := range rpms {
		var rows []row
		for _, packed := range []bool{false, true} {
			r, err := chatRun(o, rpm, packed)
			if err != nil {
				return err
			}
			rows = append(rows, r)
		}
		limit := "no RPM limit"
		if rpm > 0 {
			limit = fmt.Sprintf("%d RPM (Batcher budgets the same)", rpm)
		}
		printRows(fmt.Sprintf("Chat: %d short prompts, llmsim %v + %v per generated token, %s", o.nChat, o.latency, o.perToken, limit), rows)
	}
	return nil
}

func chatRun(o options, rpm int, packed bool) (row, error) {
	s, err := startSim(llmsim.Config{Latency: o.latency, PerToken: o.perToken, RPM: rpm})
	if err != nil {
		return row{}, err
	}
	defer s.stop()
	cfg := openai.Config{BaseURL: s.url}
	name := fmt.Sprintf("fan-out, batches of %d", o.packItems)
	if packed {
		cfg.Pack = openai.PackConfig{Enabled: true, MaxItems: o.packItems}
		name = fmt.Sprintf("packed, %d per call", o.packItems)
	}
	be, err := openai.New(cfg)
	if err != nil {
		return row{}, err
	}
	defer func() { _ = be.Close() }()
	core, err := batcher.New(
		batcher.WithQueueCapacity(o.nChat+1),
		batcher.WithQueueTimeout(30*time.Minute),
		batcher.WithBackend(batcher.BackendConfig{Name: "openai-main", Backend: be, MaxConcurrency: o.concurrency, RPM: rpm}),
		batcher.WithRoute(batcher.Route{Name: "gpt-4o-mini", Op: batcher.OpChat, Backend: "openai-main", Model: "sim-chat",
			DefaultMaxTokens: 64, Batch: batcher.BatchConfig{MaxBatchSize: o.packItems, Window: 20 * time.Millisecond}}),
	)
	if err != nil {
		return row{}, err
	}
	r := row{name: name, requests: o.nChat}
	var failed, wrong atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range o.nChat {
		wg.Go(func() {
			q := chatPrompt(i)
			res, err := core.Do(context.Background(), &batcher.Request{Route: "gpt-4o-mini", Priority: batcher.PriorityNormal,
				Input: batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "system", Content: chatSystem}, {Role: "user", Content: q}}}})
			if err != nil {
				failed.Add(1)
				return
			}
			if want, _ := llmsim.Reply(q, 64, llmsim.DefaultReplyTokens); res.Text != want {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	r.wall = time.Since(start)
	if err := core.Shutdown(context.Background()); err != nil {
		return row{}, err
	}
	st, bs := s.Stats(), be.Stats()
	r.failed, r.wrong = int(failed.Load()), int(wrong.Load())
	r.calls, r.throttled, r.prompt, r.completion, r.resent = st.Chat, st.RateLimited, st.PromptTokens, st.CompletionTokens, bs.Resent
	cs := core.Stats()[0]
	r.extra = fmt.Sprintf("core: %d dispatches, waits %v, 429s seen %d, retries %v", cs.Calls, cs.Waits, cs.RateLimited, cs.Retries)
	return r, nil
}
