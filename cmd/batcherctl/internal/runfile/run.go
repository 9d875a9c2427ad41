package runfile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// DefaultWindow is Config.Window's default: eight times the service's
// default stream window (256). The service reads no more than its window,
// and the rest waits in the connection's buffers; a window well past the
// service's keeps a fast service busy while the writer waits on a slow
// request at the head of the reorder buffer. A smaller window bounds what
// Stop waits for.
const DefaultWindow = 2048

// maxBatchItems bounds the items passed between the run's goroutines at
// once.
const maxBatchItems = 64

// flushInterval is how often the results writer flushes its buffer, so that
// a reader of the file (tail -f) sees results as they come.
const flushInterval = time.Second

// Config configures Run.
type Config struct {
	// Client opens the stream.
	Client *client.Client
	// Input is the request file; Output receives the result lines.
	Input  io.Reader
	Output io.Writer
	// Skip holds the ids of requests already done (a resumed run): their
	// lines are read and skipped.
	Skip map[string]struct{}
	// Window bounds the requests sent and not yet written (to within a
	// batch of 64), and so memory. Default DefaultWindow; a negative value
	// fails Run.
	Window int
	// Model is the route of requests whose line names none. Default: none.
	Model string
	// Timeout is the timeout of requests whose line sets none. Default:
	// none.
	Timeout time.Duration
	// MaxLineBytes bounds one input line; a longer one becomes an error
	// line. Default DefaultMaxLineBytes.
	MaxLineBytes int
	// Stop, when closed, stops the run gently: no more lines are read, the
	// stream's partial batches are flushed, and every request in flight is
	// waited for and written. Default: nil, never.
	Stop <-chan struct{}
	// Counters, when set, are updated as results are written (and Total
	// is left as the caller set it). Default: Run's own.
	Counters *Counters
	// Progress, when set, is started and stopped by Run. Default: none.
	Progress Progress
}

// Summary is how a run went.
type Summary struct {
	// Read counts the requests taken from the input (blank lines, skipped
	// ones and those read after Stop not included).
	Read int64
	// Skipped counts the requests skipped because Skip held their id.
	Skipped int64
	// Written counts result lines written; Failed counts those that are
	// errors.
	Written, Failed int64
	// Unanswered counts requests that were sent but got no result line:
	// the stream broke or was aborted before their result (or an earlier
	// one's) arrived. A resumed run sends them again.
	Unanswered int64
	// Stopped is true when Stop ended the run before the input did.
	Stopped bool
	// Tokens counts the total tokens of the completions written.
	Tokens int64
	// Elapsed is the run's duration.
	Elapsed time.Duration
}

// item is one request line on its way through the run: the reader makes
// it, the sender sends it and passes it on in input order, the writer
// writes its result.
type item struct {
	line int
	id   string
	req  *batcherv1.Request // set by the reader for the sender, which clears it
	h    *client.Handle     // set by the sender once sent
	err  error              // a failure known before sending: bad input
}

// Run streams cfg.Input's requests through one SubmitStream and writes
// their results to cfg.Output in input order. See the package doc for what
// it guarantees.
//
// Run returns an error when the run could not finish: the input could not
// be read, the output could not be written, or the stream failed or was
// aborted (ctx ended). Failed requests are not an error of Run: they are
// error lines, counted in Summary.Failed.
//
// Ending ctx aborts the stream at once; close cfg.Stop to stop gently.
// After either, Run does not wait for a read of cfg.Input that is still
// blocked (an idle pipe): that read ends when the input does.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	start := time.Now()
	if cfg.Window < 0 {
		return Summary{}, fmt.Errorf("window: must be at least 1, got %d", cfg.Window)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.Counters == nil {
		cfg.Counters = new(Counters)
	}
	counters := cfg.Counters
	stream, err := cfg.Client.Stream(ctx, client.OnSummary(func(s *batcherv1.StreamSummary) {
		counters.Answered.Store(s.GetCompleted() + s.GetFailed() + s.GetRejected())
	}))
	if err != nil {
		return Summary{}, fmt.Errorf("opening the stream: %w", err)
	}
	// Items travel in batches, so that goroutines wake once per batch, not
	// once per request. (batches+2) batches of bs items are at most in
	// flight between the sender and the writer: about Window.
	bs := min(max(cfg.Window/8, 1), maxBatchItems)
	batches := max(cfg.Window/bs-2, 1)
	r := &runner{cfg: cfg, stream: stream, batchItems: bs, halt: make(chan struct{})}
	if cfg.Progress != nil {
		cfg.Progress.Start(cfg.Counters)
	}
	sent := make(chan []item, batches) // sender to writer, in input order: the reorder buffer
	var wg sync.WaitGroup
	var readErr error
	if isRegularFile(cfg.Input) {
		// A file's reads never wait for long: one goroutine reads, parses
		// and sends, which spares a hand-off per batch.
		wg.Go(func() {
			r.send(ctx, sent, func(sendBatch func([]item) bool) { r.read(sendBatch) })
			readErr = r.readErr
		})
		werr := r.write(sent)
		wg.Wait()
		return r.finish(start, werr, readErr)
	}
	// Any other input (a pipe, a terminal) can wait in a read for ever: a
	// reader goroutine of its own reads it, so that Stop and abort reach
	// the sender.
	parsed := make(chan []item, 4) // reader to sender
	quit := make(chan struct{})    // closed when the sender stops taking lines
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(parsed)
		r.read(func(b []item) bool {
			select {
			case parsed <- b:
				return true
			case <-quit:
				return false
			}
		})
	}()
	wg.Go(func() {
		defer close(quit)
		r.send(ctx, sent, func(sendBatch func([]item) bool) { r.receive(ctx, parsed, sendBatch) })
	})
	werr := r.write(sent)
	wg.Wait()
	// A sender that took the whole input means a reader that is done. One
	// that stopped early (Stop, abort) may have left the reader in a read
	// that ends only with the input (an idle pipe): do not wait for it.
	select {
	case <-readDone:
		readErr = r.readErr
	default:
		if !r.stoppedEarly {
			<-readDone
			readErr = r.readErr
		}
	}
	return r.finish(start, werr, readErr)
}

// finish sums the run up.
func (r *runner) finish(start time.Time, werr, readErr error) (Summary, error) {
	cfg := r.cfg
	sum := r.sum
	sum.Skipped = r.skipped.Load()
	sum.Elapsed = time.Since(start)
	sum.Tokens = cfg.Counters.Tokens.Load()
	if cfg.Progress != nil {
		cfg.Progress.Stop(werr == nil && readErr == nil && r.streamErr == nil && !sum.Stopped && sum.Unanswered == 0)
	}
	return sum, errors.Join(readErr, werr, r.streamErr)
}

// runner is one Run. Each field's owner is named beside it; Run reads
// the sender's and writer's after they end, the reader's once it is done.
type runner struct {
	cfg        Config
	stream     *client.Stream
	batchItems int // items per batch between the goroutines

	sum          Summary       // Read and Stopped by the sender; the rest by the writer
	skipped      atomic.Int64  // by the reader
	readErr      error         // the reader's
	streamErr    error         // the sender's: Send, Flush or Close failed
	stoppedEarly bool          // the sender's: it stopped before the input ended
	halt         chan struct{} // closed by the writer when it fails
}

// stopped reports whether Stop has been closed, or the writer has failed
// (then sending more is pointless).
func (r *runner) stopped() bool {
	select {
	case <-r.cfg.Stop:
		return true
	case <-r.halt:
		return true
	default:
		return false
	}
}

// stopAsked reports whether Stop has been closed.
func (r *runner) stopAsked() bool {
	select {
	case <-r.cfg.Stop:
		return true
	default:
		return false
	}
}

// read reads and parses lines until the input ends or emit returns false
// (the sender has stopped). It hands them to emit in batches: when a batch is full,
// and before a read that may wait (nothing is buffered), so that a slow
// input does not hold back lines already read.
func (r *runner) read(emit func([]item) bool) {
	br := bufio.NewReaderSize(r.cfg.Input, 64<<10)
	batch := make([]item, 0, r.batchItems)
	pass := func() bool {
		if len(batch) == 0 {
			return true
		}
		ok := emit(batch)
		batch = make([]item, 0, r.batchItems)
		return ok
	}
	defer pass()
	for n := 1; ; n++ {
		if br.Buffered() == 0 && !pass() { // the next read may wait: hand on what is ready
			return
		}
		line, err := readLine(br, r.cfg.MaxLineBytes)
		if errors.Is(err, io.EOF) {
			return
		}
		it := item{line: n}
		switch {
		case errors.Is(err, errLineTooLong):
			it.id = LineID(n)
			it.err = status.Errorf(codes.InvalidArgument, "line %d: longer than %d bytes", n, r.cfg.MaxLineBytes)
		case err != nil:
			r.readErr = fmt.Errorf("reading line %d: %w", n, err)
			return
		default:
			req, perr := ParseLine(n, line)
			if req == nil && perr == nil {
				continue // blank
			}
			if perr != nil {
				it.id, it.err = LineID(n), status.Error(codes.InvalidArgument, perr.Error())
			} else {
				it.id, it.req = req.GetId(), req
				r.defaults(req)
			}
		}
		if _, done := r.cfg.Skip[it.id]; done {
			r.skipped.Add(1)
			continue
		}
		if batch = append(batch, it); len(batch) == r.batchItems && !pass() {
			return
		}
	}
}

func (r *runner) defaults(req *batcherv1.Request) {
	if req.Model == "" {
		req.Model = r.cfg.Model
	}
	if req.Timeout == nil && r.cfg.Timeout > 0 {
		req.Timeout = durationpb.New(r.cfg.Timeout)
	}
}

// send runs feed, which calls sendBatch with the parsed lines in order
// until it returns false; sendBatch sends each request and passes each item
// on to the writer in input order. Then send flushes and closes the stream.
func (r *runner) send(ctx context.Context, out chan<- []item, feed func(sendBatch func([]item) bool)) {
	// Send's context bounds only the send; the stream's own (ctx) aborts
	// it, a blocked send included. Without a Done channel, Send does not
	// register a callback on it for every request.
	sendCtx := context.WithoutCancel(ctx)
	batch := make([]item, 0, r.batchItems)
	pass := func() { // blocks while the reorder buffer is full
		if len(batch) > 0 {
			out <- batch
			batch = make([]item, 0, r.batchItems)
		}
	}
	var sendErr error
	feed(func(parsed []item) bool {
		if parsed == nil { // the feed may wait: hand on what is sent
			pass()
			return true
		}
		if ctx.Err() != nil { // aborted: sends would fail, bad lines would not
			r.stoppedEarly = true
			return false
		}
		for _, it := range parsed {
			if r.stopped() {
				r.sum.Stopped, r.stoppedEarly = r.stopAsked(), true
				return false
			}
			r.sum.Read++
			if it.req != nil {
				h, err := r.stream.Send(sendCtx, it.req)
				switch {
				case errors.Is(err, client.ErrDuplicateID):
					it.err = status.Errorf(codes.InvalidArgument, "line %d: id %q: already in flight on this run", it.line, it.id)
				case err != nil:
					r.stoppedEarly = true
					sendErr = fmt.Errorf("sending line %d: %w", it.line, err)
					return false
				}
				it.h, it.req = h, nil
			}
			if it.h == nil {
				r.cfg.Counters.Local.Add(1) // a bad line: its result is known
			}
			r.cfg.Counters.Sent.Add(1)
			if batch = append(batch, it); len(batch) == r.batchItems {
				pass()
			}
		}
		return true
	})
	if sendErr == nil && ctx.Err() != nil {
		sendErr = fmt.Errorf("run aborted: %w", context.Cause(ctx))
	}
	pass()
	close(out)
	if sendErr == nil {
		// Partial batches leave now, not at their window's end.
		sendErr = r.stream.Flush(ctx)
	}
	closeErr := r.stream.Close(ctx) // waits for every request in flight
	if sendErr != nil || closeErr != nil {
		r.streamErr = fmt.Errorf("stream: %w", errors.Join(sendErr, closeErr))
		if sendErr != nil && closeErr != nil && errors.Is(sendErr, closeErr) {
			r.streamErr = fmt.Errorf("stream: %w", sendErr)
		}
	}
}

// receive feeds sendBatch from the reader's channel until it closes,
// Stop, the writer's failure or ctx ends; before waiting for more lines it
// passes on what sendBatch has sent.
func (r *runner) receive(ctx context.Context, in <-chan []item, sendBatch func([]item) bool) {
	for {
		select {
		case parsed, ok := <-in:
			if !ok || !sendBatch(parsed) {
				return
			}
			if len(in) == 0 {
				sendBatch(nil) // nothing ready: hand on what is sent
			}
		case <-r.cfg.Stop:
			r.sum.Stopped, r.stoppedEarly = true, true
			return
		case <-r.halt:
			r.stoppedEarly = true
			return
		case <-ctx.Done():
			r.stoppedEarly = true
			return
		}
	}
}

// isRegularFile reports whether in is a regular file, whose reads end.
func isRegularFile(in io.Reader) bool {
	f, ok := in.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular()
}

// write writes each item's result in input order. Once a request has no
// result (the stream broke), it writes nothing more, so that the output
// stays the results of a prefix of the input.
func (r *runner) write(in <-chan []item) error {
	bw := bufio.NewWriterSize(r.cfg.Output, 64<<10)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	var (
		buf    []byte
		broken bool
		werr   error
		c      = r.cfg.Counters
	)
	for {
		var batch []item
		var ok bool
		select {
		case batch, ok = <-in:
		case <-tick.C:
			if werr == nil {
				if err := bw.Flush(); err != nil {
					werr = fmt.Errorf("writing results: %w", err)
					close(r.halt)
				}
			}
			continue
		}
		if !ok {
			break
		}
		for _, it := range batch {
			var comp *batcherv1.Completion
			err := it.err
			if it.h != nil {
				<-it.h.Done()
				comp, err = it.h.Wait(context.Background()) // resolved: returns at once
			}
			if broken || werr != nil || errors.Is(err, client.ErrStreamBroken) {
				broken = true
				r.sum.Unanswered++
				continue
			}
			var eerr error
			if buf, eerr = appendResult(buf[:0], it.line, it.id, comp, err); eerr == nil {
				_, eerr = bw.Write(buf)
			}
			if eerr != nil {
				werr = fmt.Errorf("writing results: %w", eerr)
				close(r.halt)
				r.sum.Unanswered++
				continue
			}
			r.sum.Written++
			c.Done.Add(1)
			if err != nil {
				r.sum.Failed++
				c.Failed.Add(1)
			}
			c.Tokens.Add(int64(comp.GetUsage().GetTotalTokens()))
		}
	}
	if werr == nil {
		if err := bw.Flush(); err != nil {
			werr = fmt.Errorf("writing results: %w", err)
		}
	}
	return werr
}
