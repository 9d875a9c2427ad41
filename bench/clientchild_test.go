package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// clientChildEnv, set in this test binary's environment to a
// clientChildConfig in JSON, makes it run the stream rig's load client
// instead of running tests (TestMain): the load in a process of its own
// (rigOpts.clientApart).
const clientChildEnv = "BATCHER_BENCH_CLIENT_CHILD"

// clientChildConfig is what the load client's process is told at its
// start.
type clientChildConfig struct {
	SimURL string // llmsim's /v1
	Addr   string // batcherd's gRPC address
	N      int    // room for N concurrent chats
	Conns  int    // connections to batcherd
}

// clientRound is one round asked of the load client's process: a line of
// JSON on its standard input.
type clientRound struct {
	N       int
	Tag     string
	Through bool
	// Signal: once every chat of the round has its first delta (or has
	// ended without one), the process says so, with a clientRoundResult
	// whose FirstDeltas is set, before the round's result
	// (BenchmarkStream2000ClientApart holds the chats open there).
	Signal bool
}

// clientRoundResult is a round's answer, a line of JSON on its standard
// output: every chat as its client saw it, and the process's CPU time
// (user and system) when the round ended.
type clientRoundResult struct {
	Chats []wireChat
	CPU   time.Duration
	Err   string // the round could not run
	// FirstDeltas marks the line that answers a round's Signal: it
	// carries nothing else, and the round's result follows it.
	FirstDeltas bool `json:",omitempty"`
}

// wireChat is a chatResult on the wire.
type wireChat struct {
	Key   string
	Start time.Time
	Sent  time.Time
	Recvs []wireRecv
	Text  string
	Err   string
}

type wireRecv struct {
	At  time.Time
	Cum int
}

// serveClientChild runs the load client of the config in clientChildEnv:
// a round for each line on its standard input, its answer a line on its
// standard output, until its standard input ends. It returns the
// process's exit code.
func serveClientChild() int {
	var cfg clientChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(clientChildEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "load client:", err)
		return 1
	}
	lc := newLoadClient(cfg.SimURL, cfg.N)
	if err := lc.dial(cfg.Addr, cfg.Conns); err != nil {
		fmt.Fprintln(os.Stderr, "load client:", err)
		return 1
	}
	defer lc.close()
	in := bufio.NewScanner(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var round clientRound
		var res clientRoundResult
		if err := json.Unmarshal(in.Bytes(), &round); err != nil {
			res.Err = err.Error()
		} else {
			var onDelta func()
			if round.Signal {
				// Called once a chat (lc.run): the last call, on a chat's
				// goroutine, comes before run returns, so the encoder is
				// never used by two at once.
				left := round.N
				var mu sync.Mutex
				onDelta = func() {
					mu.Lock()
					defer mu.Unlock()
					if left--; left == 0 {
						_ = enc.Encode(clientRoundResult{FirstDeltas: true})
					}
				}
			}
			for _, c := range lc.run(context.Background(), round.N, round.Tag, round.Through, onDelta) {
				res.Chats = append(res.Chats, toWire(c))
			}
		}
		cpu, err := rusageCPU()
		if err != nil && res.Err == "" {
			res.Err = err.Error()
		}
		res.CPU = cpu
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "load client:", err)
			return 1
		}
	}
	return 0
}

func toWire(c chatResult) wireChat {
	w := wireChat{Key: c.key, Start: c.start, Sent: c.sent, Text: c.text}
	if c.err != nil {
		w.Err = c.err.Error()
	}
	for _, r := range c.recvs {
		w.Recvs = append(w.Recvs, wireRecv{At: r.at, Cum: r.cum})
	}
	return w
}

func fromWire(w wireChat) chatResult {
	c := chatResult{key: w.Key, start: w.Start, sent: w.Sent, text: w.Text}
	if w.Err != "" {
		c.err = errors.New(w.Err)
	}
	for _, r := range w.Recvs {
		c.recvs = append(c.recvs, recv{at: r.At, cum: r.Cum})
	}
	return c
}

// clientChild is the load client's process, seen from the rig's.
type clientChild struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *json.Decoder
	mu      sync.Mutex    // one round at a time
	lastCPU time.Duration // the process's CPU time when its last round ended
}

// startClientChild starts this test binary again as the load client of
// cfg (serveClientChild).
func startClientChild(tb testing.TB, cfg clientChildConfig) *clientChild {
	tb.Helper()
	env, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cmd, in, out := startChild(tb, clientChildEnv+"="+string(env))
	return &clientChild{cmd: cmd, in: in, out: json.NewDecoder(out)}
}

// run runs a round of n chats in the load client's process, and returns
// them. A round that fails as a whole comes back as n chats with its
// error, for measure to report. onDelta, when not nil, is called n times
// once every chat has its first delta or has ended (loadClient.run calls
// it once a chat), or once the round failed.
func (c *clientChild) run(n int, tag string, through bool, onDelta func()) []chatResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	res, err := c.round(clientRound{N: n, Tag: tag, Through: through, Signal: onDelta != nil}, func() {
		for range n {
			onDelta()
		}
	})
	if err == nil && res.Err != "" {
		err = errors.New(res.Err)
	}
	if err == nil && len(res.Chats) != n {
		err = fmt.Errorf("%d chats back of %d", len(res.Chats), n)
	}
	out := make([]chatResult, n)
	for i := range out {
		if err != nil {
			out[i] = chatResult{key: fmt.Sprintf("round %s chat %d", tag, i), err: fmt.Errorf("load client's process: %w", err)}
			continue
		}
		out[i] = fromWire(res.Chats[i])
	}
	if err == nil {
		c.lastCPU = res.CPU
	}
	return out
}

// round sends r and reads its result; signalled runs when the round's
// signal came, or, for a round that asked for one, when none will.
func (c *clientChild) round(r clientRound, signalled func()) (res clientRoundResult, err error) {
	if r.Signal {
		defer func() {
			if r.Signal { // not signalled yet
				signalled()
			}
		}()
	}
	line, err := json.Marshal(r)
	if err != nil {
		return res, err
	}
	if _, err := c.in.Write(append(line, '\n')); err != nil {
		return res, err
	}
	if r.Signal {
		if err := c.out.Decode(&res); err != nil {
			return res, err
		}
		if !res.FirstDeltas {
			return res, errors.New("the round ended without its signal")
		}
		r.Signal = false
		signalled()
		res = clientRoundResult{}
	}
	err = c.out.Decode(&res)
	return res, err
}

// cpuTime returns the load client's process's CPU time, user and
// system, when its last round ended.
func (c *clientChild) cpuTime() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastCPU
}

// stop ends the process: it closes its connections once its standard
// input ends.
func (c *clientChild) stop() {
	_ = c.in.Close()
	_ = c.cmd.Wait()
}
