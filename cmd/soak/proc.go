package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process whose stderr log is scanned for addresses.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // after exited

	mu    sync.Mutex
	addrs map[string]string // log message -> the addr it announced
	tail  []string          // last log lines, for failure reports
	found chan struct{}     // nudged when an address is found
	msgs  map[string]int    // log messages seen, by count
}

var textAddr = regexp.MustCompile(`msg="([^"]+)".* addr=(\S+)`)

// start runs bin with args and env added to the environment.
func start(name, bin string, args, env []string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	// Children die with the driver, even when it exits on a failure.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), addrs: map[string]string{},
		found: make(chan struct{}, 1), msgs: map[string]int{}}
	go func() {
		p.scan(stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		msg, addr := "", ""
		if json.Unmarshal([]byte(line), &rec) == nil {
			msg, addr = rec.Msg, rec.Addr
		} else if m := textAddr.FindStringSubmatch(line); m != nil {
			msg, addr = m[1], m[2]
		}
		p.mu.Lock()
		if msg != "" {
			p.msgs[msg]++
		}
		if addr != "" {
			p.addrs[msg] = addr
			select {
			case p.found <- struct{}{}:
			default:
			}
		}
		p.tail = append(p.tail, line)
		if len(p.tail) > 40 {
			p.tail = p.tail[1:]
		}
		p.mu.Unlock()
	}
}

// addr waits for the address announced by the log message msg.
func (p *proc) addr(ctx context.Context, msg string) (string, error) {
	for {
		p.mu.Lock()
		a := p.addrs[msg]
		p.mu.Unlock()
		if a != "" {
			return a, nil
		}
		select {
		case <-p.found:
		case <-p.exited:
			return "", fmt.Errorf("%s exited before logging %q: %w\n%s", p.name, msg, p.err, p.lastLines())
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not log %q: %w", p.name, msg, ctx.Err())
		}
	}
}

func (p *proc) count(msg string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msgs[msg]
}

func (p *proc) lastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop sends SIGTERM and waits for the exit, killing after grace.
func (p *proc) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not exit within %v of SIGTERM: killed", p.name, grace)
	}
}

// rssMiB reads the process's resident set size.
func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}

// goroutines reads the goroutine count from batcherd's admin listener
// (its --pprof profiles).
func goroutines(debugAddr string) int {
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get("http://" + debugAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return -1
	}
	defer func() { _ = res.Body.Close() }()
	line, _ := bufio.NewReader(res.Body).ReadString('\n')
	// "goroutine profile: total 123"
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total ")))
	if err != nil {
		return -1
	}
	return n
}

// sample is the server's size at one moment.
type sample struct {
	rss        float64
	goroutines int
}

func (s sample) String() string {
	return fmt.Sprintf("%4d goroutines, RSS %6.1f MiB", s.goroutines, s.rss)
}

// watcher samples the server every period and keeps the peak.
type watcher struct {
	mu   sync.Mutex
	peak sample
	stop chan struct{}
	done chan struct{}
}

func watch(pid int, debugAddr string, period time.Duration) *watcher {
	w := &watcher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			s := sample{rss: rssMiB(pid), goroutines: goroutines(debugAddr)}
			w.mu.Lock()
			w.peak.rss = max(w.peak.rss, s.rss)
			w.peak.goroutines = max(w.peak.goroutines, s.goroutines)
			w.mu.Unlock()
			select {
			case <-t.C:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *watcher) end() sample {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak
}
