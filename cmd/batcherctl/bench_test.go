package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batcherhq/batcher/cmd/batcherctl/internal/runfile"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/internal/cputime"
)

// benchConfig: the simulated provider with little latency and large
// batches, so that the clients, not the provider, bound the rate.
const benchConfig = `
queue_capacity: 100000
backends:
  - name: sim
    type: sim
    max_concurrency: 16
    sim: {base_latency: 2ms, per_token: 0s}
routes:
  - name: sim-chat
    operation: chat
    backend: sim
    batching: {max_batch_size: 64, window: 2ms}
`

// benchPrompts is the size of one run.
const benchPrompts = 100_000

// BenchmarkRun100k measures `batcherctl run` of 100,000 prompts against the
// simulated backend, and a bare Go stream client (the generated stub: one
// goroutine sends the same requests, already parsed, on one SubmitStream;
// the caller receives) over the same server in the same iteration, in
// alternating order. batcherctl is the built binary, run as a user would:
// it reads and parses the file, prints plain progress, and writes the
// results in order to a new file. It reports both rates, their ratio
// (target ≥ 0.8), and each client's CPU time per request.
//
//	go test -run '^$' -bench Run100k -benchtime 1x -count 6 ./cmd/batcherctl/
//
// BENCH_CTL_ARGS adds flags to batcherctl run, e.g. "--window 256".
func BenchmarkRun100k(b *testing.B) {
	addr := startBatcherd(b, benchConfig)
	_, bin := binaries(b)
	dir := b.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	var sb strings.Builder
	reqs := make([]*batcherv1.Request, 0, benchPrompts)
	for i := 1; i <= benchPrompts; i++ {
		line := fmt.Sprintf(`{"id":"q%d","model":"sim-chat","chat":{"messages":[{"role":"user","content":"prompt number %d"}]},"params":{"maxTokens":16}}`, i, i)
		sb.WriteString(line + "\n")
		req, err := runfile.ParseLine(i, []byte(line))
		if err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	if err := os.WriteFile(in, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()

	out := filepath.Join(dir, "out.jsonl")
	var ctlCPU, bareCPU time.Duration
	runCtl := func() time.Duration {
		if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.Fatal(err)
		}
		start := time.Now()
		args := append([]string{"--addr", addr, "run", in, "--out", out}, strings.Fields(os.Getenv("BENCH_CTL_ARGS"))...)
		cmd := exec.CommandContext(b.Context(), bin, args...)
		cmd.Env = cleanEnv()
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("batcherctl run: %v\n%s", err, msg)
		}
		ctlCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return time.Since(start)
	}
	runBare := func() time.Duration {
		start, cpu0 := time.Now(), cputime.Process()
		if n, err := bareStream(b.Context(), conn, reqs); err != nil || n != len(reqs) {
			b.Fatalf("bare stream: %d completions, %v", n, err)
		}
		bareCPU += cputime.Process() - cpu0
		return time.Since(start)
	}
	var ctlTime, bareTime time.Duration
	for i := 0; b.Loop(); i++ {
		if (i+benchRound)%2 == 0 {
			bareTime += runBare()
			ctlTime += runCtl()
		} else {
			ctlTime += runCtl()
			bareTime += runBare()
		}
	}
	benchRound++
	n := float64(b.N * benchPrompts)
	b.ReportMetric(n/ctlTime.Seconds(), "ctl-req/s")
	b.ReportMetric(n/bareTime.Seconds(), "bare-req/s")
	b.ReportMetric(bareTime.Seconds()/ctlTime.Seconds(), "ratio")
	b.ReportMetric(1e6*ctlCPU.Seconds()/n, "ctl-cpu-µs/req")
	b.ReportMetric(1e6*bareCPU.Seconds()/n, "bare-cpu-µs/req")
}

// benchRound alternates which client goes first across -count runs.
var benchRound int

// bareStream sends reqs on one SubmitStream with the generated stub, the
// least a Go client can do, and counts the completions.
func bareStream(ctx context.Context, conn *grpc.ClientConn, reqs []*batcherv1.Request) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := batcherv1.NewBatcherServiceClient(conn).SubmitStream(ctx)
	if err != nil {
		return 0, err
	}
	// BENCH_BARE_WINDOW bounds the requests the bare client has in flight,
	// as batcherctl's --window does (default: no bound).
	var window chan struct{}
	if w, _ := strconv.Atoi(os.Getenv("BENCH_BARE_WINDOW")); w > 0 {
		window = make(chan struct{}, w)
	}
	sent := make(chan error, 1)
	go func() {
		send := func(m *batcherv1.SubmitStreamRequest) error {
			if window != nil && m.GetRequest() != nil {
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return st.Send(m)
		}
		err := send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Options{
			Options: &batcherv1.StreamOptions{Verbosity: batcherv1.Verbosity_VERBOSITY_COMPLETIONS}}})
		for _, r := range reqs {
			if err != nil {
				break
			}
			err = send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Request{Request: r}})
		}
		if err == nil {
			err = send(&batcherv1.SubmitStreamRequest{Kind: &batcherv1.SubmitStreamRequest_Flush{Flush: &batcherv1.Flush{}}})
		}
		if err == nil {
			err = st.CloseSend()
		}
		sent <- err
	}()
	n := 0
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			cancel()
			return n, errors.Join(err, <-sent)
		}
		if c := m.GetCompletion(); c != nil {
			if window != nil {
				<-window
			}
			if c.GetError() == nil {
				n++
			}
		}
	}
	return n, <-sent
}
