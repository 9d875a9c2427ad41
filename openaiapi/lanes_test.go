package openaiapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// TestLaneShareByConnection: the lane cap's fair share holds per HTTP
// connection, as it does per gRPC connection. One caller on one HTTP/2
// connection, sending each request with its own seed (a lane each), holds
// at most half of 4 lanes while another connection holds one; the other
// connection can still open its own. Without a connection on the front
// door's requests, both callers were one, and the first took 3 of the 4.
func TestLaneShareByConnection(t *testing.T) {
	f := newFake()
	f.hold = true
	e := newEnv(t, f,
		withBatch(batcher.BatchConfig{MaxBatchSize: 1, MinBatchSize: 1, Window: time.Millisecond, MaxWait: time.Millisecond}),
		withCore(batcher.WithMaxLanes(4), batcher.WithIdleLaneTimeout(time.Hour)))
	// HTTP/2: one connection carries a caller's concurrent requests.
	srv := httptest.NewUnstartedServer(e.handler)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base := srv.Client().Transport.(*http.Transport)
	callerA := &http.Client{Transport: base.Clone()}
	callerB := &http.Client{Transport: base.Clone()}
	t.Cleanup(callerA.CloseIdleConnections)
	t.Cleanup(callerB.CloseIdleConnections)

	type answer struct {
		code  int
		proto string
		body  string
		err   error
	}
	send := func(c *http.Client, seed int) answer {
		body := fmt.Sprintf(`{"model":"chat","seed":%d,"messages":[{"role":"user","content":"seed %d"}]}`, seed, seed)
		req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return answer{err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := c.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return answer{code: resp.StatusCode, proto: resp.Proto, body: string(b), err: err}
	}
	var held []chan answer
	// hold sends a request that reaches the backend and stays there.
	hold := func(c *http.Client, seed int) {
		t.Helper()
		ch := make(chan answer, 1)
		go func() { ch <- send(c, seed) }()
		select {
		case <-f.started:
		case a := <-ch:
			t.Fatalf("seed %d: answered %d %s before reaching the backend: %v", seed, a.code, a.body, a.err)
		case <-time.After(testTimeout):
			t.Fatalf("seed %d never reached the backend", seed)
		}
		held = append(held, ch)
	}
	hold(callerB, 100)
	hold(callerA, 1)
	hold(callerA, 2)
	// A holds 2 of 4 lanes, its half beside B: a third is refused.
	a := send(callerA, 3)
	if a.err != nil || a.code != http.StatusTooManyRequests || !strings.Contains(a.body, "too_many_lanes") || !strings.Contains(a.body, "fair share") {
		t.Fatalf("caller A's third lane: %d %s (%v); want 429 too_many_lanes at its fair share", a.code, a.body, a.err)
	}
	// B's share is not A's: B opens its second.
	hold(callerB, 101)
	f.Release()
	for _, ch := range held {
		a := <-ch
		if a.err != nil || a.code != http.StatusOK {
			t.Errorf("a held request: %d %s (%v)", a.code, a.body, a.err)
		} else if a.proto != "HTTP/2.0" {
			t.Errorf("answered over %s; the test needs HTTP/2 (one connection a caller)", a.proto)
		}
	}
}
