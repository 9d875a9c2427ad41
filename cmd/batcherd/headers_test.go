package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/batcherhq/batcher/security"
)

// headerAttack sends one gRPC call whose authorization header holds size
// bytes, as an attacker would: raw HTTP/2 frames that ignore the server's
// SETTINGS_MAX_HEADER_LIST_SIZE (grpc-go's own client would refuse to
// send them). It returns how the server answered: "goaway", "rst" or
// "closed" (the connection ended while the headers were being written),
// or "headers" when the server answered the call.
func headerAttack(addr string, size int) (string, error) {
	// The header block first: encoding 8 MB under the race detector, 40
	// at once, takes seconds, which must not count against the
	// connection's deadline (a client that timed itself out would read as
	// the server closing the connection).
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/batcher.v1.BatcherService/Submit"}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"authorization", "Bearer " + strings.Repeat("a", size)},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	bw := bufio.NewWriterSize(conn, 64<<10)
	if _, err := bw.WriteString(http2.ClientPreface); err != nil {
		return "", err
	}
	fr := http2.NewFramer(bw, conn)
	if err := fr.WriteSettings(); err != nil {
		return "", err
	}
	answered := make(chan string, 1)
	go func() { // read while writing: the server may answer mid-way
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				answered <- "closed"
				return
			}
			switch f.(type) {
			case *http2.GoAwayFrame:
				answered <- "goaway"
				return
			case *http2.RSTStreamFrame:
				answered <- "rst"
				return
			case *http2.HeadersFrame:
				answered <- "headers"
				return
			}
		}
	}()
	const chunk = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
	b := block.Bytes()
	first := b[:min(chunk, len(b))]
	werr := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(b) <= chunk})
	for off := len(first); werr == nil && off < len(b); off += chunk {
		end := min(off+chunk, len(b))
		werr = fr.WriteContinuation(1, end == len(b), b[off:end])
	}
	if werr == nil { // an empty request message, so that the unary call runs
		werr = fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
	}
	if werr == nil {
		werr = bw.Flush()
	}
	select {
	case a := <-answered:
		return a, nil
	case <-time.After(30 * time.Second):
		if werr != nil {
			return "", fmt.Errorf("no answer (write: %w)", werr)
		}
		return "", errors.New("no answer")
	}
}

// procStatus reads a field of /proc/pid/status in KiB.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestHeaderLimitBoundsMemory: batcherd's gRPC listener refuses a call
// whose headers pass security.DefaultMaxHeaderBytes before authenticating
// it, and 40 concurrent calls with 8 MB authorization headers raise its
// peak RSS by at most 32 MiB (grpc-go's own 16 MB limit let them take more
// than 1 GiB). The HTTP front door answers such headers 431.
func TestHeaderLimitBoundsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs batcherd")
	}
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(tenants, []byte("tenants:\n  - name: a\n    tokens: ["+security.HashToken(newToken())+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, buildBatcherd(t), "--tenants", tenants)
	pid := d.cmd.Process.Pid

	// Under the limit the headers are read and the call is refused for
	// its credential: the server answers with HEADERS (trailers-only).
	if got, err := headerAttack(d.addr, 4<<10); err != nil || got != "headers" {
		t.Fatalf("4 KiB header: %q %v, want an answer", got, err)
	}
	if got, err := headerAttack(d.addr, 64<<10); err != nil || got == "headers" {
		t.Fatalf("64 KiB header: %q %v, want the call refused before an answer", got, err)
	}

	before := procStatus(t, pid, "VmRSS")
	const n, size = 40, 8 << 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := headerAttack(d.addr, size)
			if err == nil && got == "headers" {
				err = errors.New("an 8 MB header was answered")
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	peak := procStatus(t, pid, "VmHWM")
	rise := (peak - before) >> 10
	t.Logf("RSS before %d MiB, peak after %d concurrent %d MiB headers %d MiB: +%d MiB", before>>10, n, size>>20, peak>>10, rise)
	if rise > 32 {
		t.Errorf("peak RSS rose by %d MiB, want at most 32", rise)
	}

	// The HTTP front door: 431 Request Header Fields Too Large.
	var httpAddr string
	for _, line := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(line, `"http listening"`) {
			if i := strings.Index(line, `"addr":"`); i >= 0 {
				httpAddr = strings.SplitN(line[i+len(`"addr":"`):], `"`, 2)[0]
			}
		}
	}
	if httpAddr == "" {
		t.Fatalf("no http listener in\n%s", d.logs)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+httpAddr+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("front door with a 64 KiB header: %d, want 431", resp.StatusCode)
	}
}
