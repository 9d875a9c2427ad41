package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// simChildEnv, set in this test binary's environment, makes it serve
// llmsim behind a chunkTap instead of running tests (TestMain): the stream
// rig's llmsim in a process of its own (rigOpts.simApart).
const simChildEnv = "BATCHER_BENCH_SIM_CHILD"

// serveSimChild serves llmsim as the stream benchmarks configure it,
// behind a tap whose stamps GET /stamps returns (and forgets), on a
// loopback port it prints on its first line of output. It serves until
// its standard input ends (the parent closed it, or exited), and returns
// the process's exit code.
func serveSimChild() int {
	sim, err := newStreamSim()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer sim.Close()
	tap := &chunkTap{next: sim, by: make(map[string][]tapChunk), arr: make(map[string]time.Time)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stamps", tap.serveStamps)
	mux.Handle("/", tap)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	fmt.Println("http://" + lis.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// tapStamps is a tap's stamps on the wire.
type tapStamps struct {
	By  map[string][]wireChunk `json:"by"`
	Arr map[string]time.Time   `json:"arr"`
}

type wireChunk struct {
	At  time.Time `json:"at"`
	Cum int       `json:"cum"`
}

// serveStamps writes the tap's stamps so far and forgets them.
func (t *chunkTap) serveStamps(w http.ResponseWriter, _ *http.Request) {
	t.mu.Lock()
	out := tapStamps{By: make(map[string][]wireChunk, len(t.by)), Arr: t.arr}
	for k, cs := range t.by {
		for _, c := range cs {
			out.By[k] = append(out.By[k], wireChunk{At: c.at, Cum: c.cum})
		}
	}
	t.by, t.arr = make(map[string][]tapChunk), make(map[string]time.Time)
	t.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// startChild starts this test binary again with env (NAME=value) added to
// its environment, its stderr this process's, and returns it with its
// stdin and stdout: the child processes of the rig (llmsim's, the load
// client's) are this binary's TestMain seeing its variable.
func startChild(tb testing.TB, env string) (cmd *exec.Cmd, in io.WriteCloser, out io.ReadCloser) {
	tb.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if out, err = cmd.StdoutPipe(); err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return cmd, in, out
}

// startSimChild starts this test binary again as llmsim's process
// (serveSimChild) and returns its base URL and a function that stops it.
func startSimChild(tb testing.TB) (url string, stop func()) {
	tb.Helper()
	cmd, in, out := startChild(tb, simChildEnv+"=1")
	stop = func() {
		_ = in.Close()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		tb.Fatalf("llmsim's process printed no address: %v", err)
	}
	return strings.TrimSpace(line), stop
}

// pullStamps adds the stamps of llmsim's own process, when it has one, to
// r's tap, so that measure and hops read them as they read a tap in this
// process. The clocks agree: both processes' stamps are the host's wall
// clock.
func (r *streamRig) pullStamps(tb testing.TB) {
	tb.Helper()
	if r.stampsURL == "" {
		return
	}
	resp, err := r.hc.Get(r.stampsURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var st tapStamps
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		tb.Fatal(err)
	}
	r.tap.mu.Lock()
	defer r.tap.mu.Unlock()
	for k, cs := range st.By {
		for _, c := range cs {
			r.tap.by[k] = append(r.tap.by[k], tapChunk{at: c.At, cum: c.Cum})
		}
	}
	for k, t := range st.Arr {
		r.tap.arr[k] = t
	}
}
