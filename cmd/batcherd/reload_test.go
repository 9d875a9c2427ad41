package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/security"
)

// plainToken sends a bearer token over a plaintext loopback connection.
type plainToken string

func (p plainToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(p)}, nil
}
func (plainToken) RequireTransportSecurity() bool { return false }

// busyLoad keeps route busy with 8 callers until the returned stop is
// called; stop fails the test unless every call succeeded and some ran,
// and returns how many ran.
func busyLoad(t *testing.T, c *client.Client, route string) (stop func() int64) {
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := c.Submit(context.WithoutCancel(ctx), client.Embed(route, "hello")); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	return func() int64 {
		t.Helper()
		cancel()
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Fatalf("%d of %d requests on %s failed across the reloads; first: %v", n, n+ok.Load(), route, firstErr.Load())
		}
		if ok.Load() == 0 {
			t.Fatal("no load ran")
		}
		return ok.Load()
	}
}

const reloadBackends = `backends:
  - {name: fast, type: sim, sim: {base_latency: 2ms}}
  - {name: slow, type: sim, sim: {base_latency: 1s}}
`

// TestReloadUnderLoad: while callers keep a route busy, SIGHUP reloads a
// configuration that removes one route, adds another and changes the busy
// one, and a tenants file that adds a tenant. No request is lost: every
// call on the busy route succeeds, the requests in flight on the removed
// route finish on it, and afterwards it is unknown. A bad configuration
// is then refused whole, and the routes in force keep serving.
func TestReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	cfgFile, tenants := filepath.Join(dir, "batcherd.yaml"), filepath.Join(dir, "tenants.yaml")
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(name+".tmp", []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(name+".tmp", name); err != nil {
			t.Fatal(err)
		}
	}
	tokA, tokB := newToken(), newToken()
	write(tenants, fmt.Sprintf("tenants:\n  - {name: team-a, tokens: [%s]}\n", security.HashToken(tokA)))
	write(cfgFile, "security: {reload_interval: -1s}\n"+reloadBackends+`routes:
  - {name: busy, operation: embedding, backend: fast}
  - {name: gone, operation: embedding, backend: slow}
`)
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", cfgFile, "--tenants", tenants)
	dial := func(tok string) *client.Client {
		c, err := client.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(plainToken(tok)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := dial(tokA)
	ctx := t.Context()

	stopLoad := busyLoad(t, a, "busy")
	// Requests in flight on the route about to go: dispatched to the slow
	// backend before the reload.
	dispatched := make(chan struct{}, 4)
	s, err := a.Stream(ctx, client.WithVerbosity(batcherv1.Verbosity_VERBOSITY_ALL), client.OnEvent(func(ev *batcherv1.Event) {
		if ev.GetDispatched() != nil {
			dispatched <- struct{}{}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	var gone []*client.Handle
	for i := range 4 {
		h, err := s.Send(ctx, client.Embed("gone", fmt.Sprint("in flight ", i)))
		if err != nil {
			t.Fatal(err)
		}
		gone = append(gone, h)
	}
	for range 4 {
		<-dispatched
	}

	write(cfgFile, "security: {reload_interval: -1s}\n"+reloadBackends+`routes:
  - {name: busy, operation: embedding, backend: fast, batching: {max_batch_size: 3}}
  - {name: added, operation: embedding, backend: fast}
`)
	write(tenants, fmt.Sprintf("tenants:\n  - {name: team-a, tokens: [%s]}\n  - {name: team-b, tokens: [%s]}\n",
		security.HashToken(tokA), security.HashToken(tokB)))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, `"msg":"configuration reloaded"`)
	for _, h := range gone {
		if _, err := h.Wait(ctx); err != nil {
			t.Fatalf("a request in flight on the removed route: %v", err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Submit(ctx, client.Embed("gone", "after")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the removed route after the reload: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := dial(tokB).Submit(ctx, client.Embed("added", "new tenant, new route")); err != nil {
		t.Fatalf("team-b on the added route: %v", err)
	}

	// A bad configuration (a route on a backend that does not exist): refused whole.
	write(cfgFile, "security: {reload_interval: -1s}\n"+reloadBackends+`routes:
  - {name: busy, operation: embedding, backend: fast}
  - {name: broken, operation: embedding, backend: nowhere}
`)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, `"msg":"config reload refused; the old configuration stays in force"`)
	if _, err := a.Submit(ctx, client.Embed("added", "still served")); err != nil {
		t.Fatalf("the added route after a refused reload: %v", err)
	}
	n := stopLoad()
	t.Logf("%d requests on the busy route across two reloads, none lost", n)
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d\n%s", code, logs)
	}
}

// waitBackendMax reads WatchStats snapshots (sampled each second) until
// the named backend's configured max concurrency and RPM are as wanted.
func waitBackendMax(t *testing.T, ctx context.Context, conn grpc.ClientConnInterface, name string, wantMax int32, wantRPM int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	ws, err := batcherv1.NewAdminServiceClient(conn).WatchStats(ctx, &batcherv1.WatchStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var last []*batcherv1.BackendStats
	for {
		snap, err := ws.Recv()
		if err != nil {
			t.Fatalf("backend %q: want max concurrency %d and rpm %d; last seen %v (%v)", name, wantMax, wantRPM, last, err)
		}
		last = snap.GetSnapshot().GetBackends()
		for _, b := range last {
			if b.GetName() == name && b.GetMaxConcurrency() == wantMax && b.GetRpmMax() == wantRPM {
				return
			}
		}
	}
}

// TestReloadBackendsOnFileChange: with no SIGHUP, an edit of the
// configuration file is seen and applied under load. First a backend's
// limits change in place (the same backend, its new limits in the stats);
// then its simulated provider's settings change and a backend and route
// are added, which builds the changed backend anew while requests in
// flight on the old one finish there. No request is lost; a bad edit is
// refused once and the configuration in force keeps serving.
func TestReloadBackendsOnFileChange(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "batcherd.yaml")
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(cfgFile+".tmp", []byte("security: {reload_interval: 20ms}\n"+data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfgFile+".tmp", cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	write(`backends: [{name: up, type: sim, max_concurrency: 2, sim: {base_latency: 300ms}}]
routes: [{name: busy, operation: embedding, backend: up}]
`)
	addr, stop, exit, logs := startInProcess(t, "--listen=127.0.0.1:0", "--config", cfgFile)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := client.New(conn)
	ctx := t.Context()
	waitBackendMax(t, ctx, conn, "up", 2, 0)

	stopLoad := busyLoad(t, c, "busy")

	write(`backends: [{name: up, type: sim, max_concurrency: 7, rpm: 6000, sim: {base_latency: 300ms}}]
routes: [{name: busy, operation: embedding, backend: up}]
`)
	waitLog(t, logs, `"backends_kept":["up"]`)
	waitBackendMax(t, ctx, conn, "up", 7, 6000)

	write(`backends:
  - {name: up, type: sim, max_concurrency: 7, sim: {base_latency: 1ms}}
  - {name: extra, type: sim}
routes:
  - {name: busy, operation: embedding, backend: up}
  - {name: more, operation: embedding, backend: extra}
`)
	waitLog(t, logs, `"backends_rebuilt":["up"],"backends_added":["extra"]`)
	if _, err := c.Submit(ctx, client.Embed("more", "on the added backend")); err != nil {
		t.Fatalf("the added route: %v", err)
	}

	write(`backends: [{name: up, type: sim, max_concurrency: 0.5}]
routes: [{name: busy, operation: embedding, backend: up}]
`)
	waitLog(t, logs, `"msg":"config reload refused; the old configuration stays in force"`)
	if _, err := c.Submit(ctx, client.Embed("more", "still served")); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}
	n := stopLoad()
	if n := strings.Count(logs.String(), "config reload refused"); n != 1 {
		t.Fatalf("the bad file was tried %d times, want once:\n%s", n, logs)
	}
	t.Logf("%d requests across three edits of the file, none lost", n)
	stop()
	if code := <-exit; code != exitOK {
		t.Fatalf("exit %d\n%s", code, logs)
	}
}
