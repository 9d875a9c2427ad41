package runfile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	"github.com/batcherhq/batcher/cmd/batcherctl/internal/runfile"
	"github.com/batcherhq/batcher/server"
)

// testTimeout bounds each test, so that a bug fails it instead of hanging.
const testTimeout = time.Minute

// upper answers each chat with its last message in capitals, one token per
// byte; later batches may finish before earlier ones (they sleep less), so
// results arrive out of order.
var upper = batcher.BackendFunc(func(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
	for i, r := range b.Requests {
		msgs := r.Input.Messages
		text := strings.ToUpper(msgs[len(msgs)-1].Content)
		out[i] = batcher.Response{Text: text, FinishReason: batcher.FinishStop,
			Usage: batcher.Usage{CompletionTokens: int32(len(text))}}
	}
	return nil
})

// serve runs the real service over an in-memory listener with one chat
// route "chat" on be, and returns a client of it.
func serve(t *testing.T, be batcher.Backend, bc batcher.BatchConfig, opts ...server.Option) *client.Client {
	t.Helper()
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "be", Backend: be, MaxConcurrency: 4}),
		batcher.WithRoute(batcher.Route{Name: "chat", Op: batcher.OpChat, Backend: "be", Batch: bc}),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(core, append([]server.Option{server.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	gs := server.NewGRPCServer(nil)
	srv.Register(gs)
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gs.Stop()
		<-served
	})
	return client.New(conn)
}

func chatLine(id, content string) string {
	return fmt.Sprintf(`{"id":%q,"model":"chat","chat":{"messages":[{"role":"user","content":%q}]}}`, id, content)
}

// results parses a results file, failing the test on a line that is not one.
func results(t *testing.T, out []byte) []runfile.Result {
	t.Helper()
	var rs []runfile.Result
	for i, line := range bytes.SplitAfter(out, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[len(line)-1] != '\n' {
			t.Fatalf("results line %d has no newline: %q", i+1, line)
		}
		var r runfile.Result
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("results line %d: %v: %q", i+1, err, line)
		}
		rs = append(rs, r)
	}
	return rs
}

func completionText(t *testing.T, r runfile.Result) string {
	t.Helper()
	var c struct{ Text string }
	if err := json.Unmarshal(r.Completion, &c); err != nil {
		t.Fatalf("line %d: completion %s: %v", r.Line, r.Completion, err)
	}
	return c.Text
}

// Good and bad lines, more than the window and the server's stream window:
// every line gets its result in input order, bad ones an error line naming
// the line, and memory stays within the window.
func TestRunOrderAndErrors(t *testing.T) {
	c := serve(t, upper, batcher.BatchConfig{MaxBatchSize: 7, MinBatchSize: 1, Window: time.Millisecond}, server.WithStreamWindow(16))
	var in strings.Builder
	const n = 600
	for i := 1; i <= n; i++ {
		switch i % 100 {
		case 10:
			in.WriteString("{not json\n")
		case 20:
			in.WriteString(`{"model":"nope","chat":{"messages":[{"role":"user","content":"x"}]}}` + "\n")
		case 30:
			in.WriteString("\n") // blank: no result
		case 40:
			in.WriteString(`{"model":"chat","chat":{"messages":[{"role":"user","content":"no id"}]}}` + "\n")
		default:
			in.WriteString(chatLine(fmt.Sprintf("q%d", i), fmt.Sprintf("p%d", i)) + "\n")
		}
	}
	// A file is read by the sender itself, any other reader by a goroutine
	// of its own: both must give the same results.
	for _, kind := range []string{"reader", "file"} {
		t.Run(kind, func(t *testing.T) { checkOrderAndErrors(t, c, in.String(), kind == "file") })
	}
}

func checkOrderAndErrors(t *testing.T, c *client.Client, in string, file bool) {
	const n = 600
	var input io.Reader = strings.NewReader(in)
	if file {
		f, err := os.CreateTemp(t.TempDir(), "in.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		if _, err := f.WriteString(in); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		input = f
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	counters := new(runfile.Counters)
	sum, err := runfile.Run(ctx, runfile.Config{Client: c, Input: input, Output: &out, Window: 8, Counters: counters})
	if err != nil {
		t.Fatal(err)
	}
	rs := results(t, out.Bytes())
	if want := n - n/100; len(rs) != want || sum.Written != int64(want) || sum.Read != int64(want) {
		t.Fatalf("%d results, summary %+v; want %d", len(rs), sum, want)
	}
	prev := 0
	for _, r := range rs {
		if r.Line <= prev {
			t.Fatalf("line %d after line %d: not in input order", r.Line, prev)
		}
		prev = r.Line
		switch r.Line % 100 {
		case 10:
			if r.Error == nil || r.Error.Code != "INVALID_ARGUMENT" || !strings.HasPrefix(r.Error.Message, fmt.Sprintf("line %d: ", r.Line)) || r.ID != runfile.LineID(r.Line) {
				t.Errorf("malformed line %d: %+v %+v", r.Line, r, r.Error)
			}
		case 20:
			if r.Error == nil || !strings.Contains(r.Error.Message, `unknown model "nope"`) {
				t.Errorf("unknown model on line %d: %+v", r.Line, r.Error)
			}
		case 40:
			if r.ID != runfile.LineID(r.Line) || completionText(t, r) != "NO ID" {
				t.Errorf("line %d without id: id %q text %q", r.Line, r.ID, completionText(t, r))
			}
		default:
			if want := fmt.Sprintf("P%d", r.Line); r.Error != nil || r.ID != fmt.Sprintf("q%d", r.Line) || completionText(t, r) != want {
				t.Errorf("line %d: %+v, text %q; want %s", r.Line, r, completionText(t, r), want)
			}
		}
	}
	if wantFailed := int64(2 * n / 100); sum.Failed != wantFailed || counters.Failed.Load() != wantFailed || counters.Done.Load() != sum.Written {
		t.Errorf("summary %+v, counters done %d failed %d; want %d failed", sum, counters.Done.Load(), counters.Failed.Load(), wantFailed)
	}
	if sum.Tokens == 0 || sum.Tokens != counters.Tokens.Load() {
		t.Errorf("tokens %d, counters %d", sum.Tokens, counters.Tokens.Load())
	}
}

// A resumed run skips the ids it is given; a duplicate id in flight is an
// error line, not a broken run.
func TestRunSkipAndDuplicates(t *testing.T) {
	c := serve(t, upper, batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1, Window: time.Millisecond})
	in := strings.Join([]string{chatLine("a", "a"), chatLine("b", "b"), chatLine("dup", "1"), chatLine("dup", "2"), chatLine("c", "c")}, "\n")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	prog := new(hookProgress)
	sum, err := runfile.Run(ctx, runfile.Config{Client: c, Input: strings.NewReader(in), Output: &out,
		Skip: map[string]struct{}{"b": {}}, Progress: prog})
	if err != nil {
		t.Fatal(err)
	}
	rs := results(t, out.Bytes())
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "a,dup,dup,c" || sum.Skipped != 1 {
		t.Fatalf("ids %v, summary %+v; want a,dup,dup,c with b skipped", ids, sum)
	}
	// The second dup may find the first one still in flight (an error line)
	// or done (a second completion); both are one line each.
	if rs[1].Error != nil {
		t.Errorf("first dup failed: %+v", rs[1].Error)
	}
	if !prog.started || !prog.complete {
		t.Error("progress not stopped as complete")
	}
}

// Stop ends the run gently: what was sent is waited for and written, the
// rest of the input is left, and the output is a prefix of the input.
func TestRunStop(t *testing.T) {
	release := make(chan struct{})
	dispatched := make(chan struct{}, 1)
	be := batcher.BackendFunc(func(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
		select {
		case dispatched <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return upper(ctx, b, out)
	})
	c := serve(t, be, batcher.BatchConfig{MaxBatchSize: 4, MinBatchSize: 4, Window: time.Hour, MaxWait: time.Hour}, server.WithStreamWindow(10))
	var in strings.Builder
	for i := 1; i <= 1000; i++ {
		in.WriteString(chatLine(fmt.Sprintf("q%d", i), "x") + "\n")
	}
	stop := make(chan struct{})
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	done := make(chan struct{})
	var sum runfile.Summary
	var err error
	go func() {
		defer close(done)
		sum, err = runfile.Run(ctx, runfile.Config{Client: c, Input: strings.NewReader(in.String()), Output: &out, Window: 20, Stop: stop})
	}()
	<-dispatched // requests are in flight, the window is full
	close(stop)
	close(release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	rs := results(t, out.Bytes())
	if !sum.Stopped || sum.Written != int64(len(rs)) || len(rs) == 0 || len(rs) >= 1000 || sum.Unanswered != 0 {
		t.Fatalf("summary %+v with %d results; want stopped with some written", sum, len(rs))
	}
	for i, r := range rs {
		if r.Line != i+1 || r.Error != nil {
			t.Fatalf("result %d: %+v: want line %d succeeded", i, r, i+1)
		}
	}
}

// Cancelling the context aborts: no result is written for a request that
// had none, the output stays a prefix, and Run says why it did not finish.
func TestRunAbort(t *testing.T) {
	dispatched := make(chan struct{}, 1)
	be := batcher.BackendFunc(func(ctx context.Context, b *batcher.Batch, out []batcher.Response) error {
		if b.Requests[0].Input.Messages[0].Content == "hold" {
			select {
			case dispatched <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}
		return upper(ctx, b, out)
	})
	c := serve(t, be, batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1, Window: time.Millisecond})
	in := chatLine("a", "a") + "\n" + chatLine("b", "b") + "\n" + chatLine("h", "hold") + "\n" + chatLine("d", "d") + "\n"
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	var sum runfile.Summary
	var err error
	go func() {
		defer close(done)
		sum, err = runfile.Run(ctx, runfile.Config{Client: c, Input: strings.NewReader(in), Output: &out})
	}()
	<-dispatched
	cancel()
	<-done
	if status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want CANCELLED", err)
	}
	rs := results(t, out.Bytes())
	for i, r := range rs {
		if r.Line != i+1 || r.Error != nil {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if len(rs) > 2 || sum.Unanswered < 1 || sum.Written+sum.Unanswered != sum.Read {
		t.Errorf("%d results, summary %+v: want at most a and b, the held one unanswered", len(rs), sum)
	}
}

// hookProgress records what Run tells a Progress.
type hookProgress struct {
	started, complete bool
}

func (p *hookProgress) Start(*runfile.Counters) { p.started = true }
func (p *hookProgress) Stop(complete bool)      { p.complete = complete }
func (p *hookProgress) Notice(string)           {}

// Stop and abort end a run whose input is an idle pipe: Run does not wait
// for the read that waits for more input.
func TestRunStopIdleInput(t *testing.T) {
	c := serve(t, upper, batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1, Window: time.Millisecond})
	for _, abort := range []bool{false, true} {
		pr, pw := io.Pipe()
		counters := new(runfile.Counters)
		stop := make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		var out bytes.Buffer
		done := make(chan struct{})
		var sum runfile.Summary
		var err error
		go func() {
			defer close(done)
			sum, err = runfile.Run(ctx, runfile.Config{Client: c, Input: pr, Output: &out, Stop: stop, Counters: counters,
				Progress: &hookProgress{}})
		}()
		if _, werr := io.WriteString(pw, chatLine("a", "a")+"\n"); werr != nil {
			t.Fatal(werr)
		}
		if abort {
			cancel()
		} else {
			close(stop)
		}
		<-done
		cancel()
		_ = pw.Close() // ends the reader's read
		switch {
		case abort && (err == nil || !strings.Contains(err.Error(), "context canceled")):
			t.Errorf("abort: error %v, want one saying the context was cancelled", err)
		case !abort && (err != nil || !sum.Stopped):
			t.Errorf("stop: %+v, %v; want stopped, no error", sum, err)
		}
		if rs := results(t, out.Bytes()); len(rs) > 1 || (len(rs) == 1 && rs[0].ID != "a") {
			t.Errorf("results %+v", rs)
		}
	}
}

// failingWriter fails every write once it has taken n bytes.
type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

// When the results cannot be written, the run stops sending and says why.
func TestRunOutputFails(t *testing.T) {
	c := serve(t, upper, batcher.BatchConfig{MaxBatchSize: 4, MinBatchSize: 1, Window: time.Millisecond})
	var in strings.Builder
	const n = 20000
	for i := 1; i <= n; i++ {
		in.WriteString(chatLine(fmt.Sprintf("q%d", i), "x") + "\n")
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	sum, err := runfile.Run(ctx, runfile.Config{Client: c, Input: strings.NewReader(in.String()), Output: &failingWriter{n: 100 << 10}, Window: 16})
	if err == nil || !strings.Contains(err.Error(), "writing results: disk full") {
		t.Errorf("error %v, want the write's", err)
	}
	if sum.Read >= n || sum.Unanswered == 0 {
		t.Errorf("summary %+v: want the run stopped early, the unwritten counted", sum)
	}
}
