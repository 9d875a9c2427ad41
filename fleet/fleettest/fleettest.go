// Package fleettest finds the Redis that fleet tests run against and gives
// each test a key prefix of its own.
package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batcherhq/batcher/internal/tcpproxy"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// DefaultAddr is where tests look for Redis unless BATCHER_TEST_REDIS_ADDR says
// otherwise.
const DefaultAddr = "127.0.0.1:6379"

// Redis returns the address of a Redis that answers. Without one it skips
// the test and says so, unless BATCHER_REQUIRE_SERVICES=1, which fails it.
func Redis(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("BATCHER_TEST_REDIS_ADDR")
	if addr == "" {
		addr = DefaultAddr
	}
	c := Client(addr)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if os.Getenv("BATCHER_REQUIRE_SERVICES") == "1" {
			t.Fatalf("Redis required (BATCHER_REQUIRE_SERVICES=1) at %s: %v", addr, err)
		}
		t.Skipf("SKIPPED: no Redis at %s (%v); the fleet tests need one", addr, err)
	}
	return addr
}

// Prefix returns a key prefix unique to this test (other tests, and other
// people's, share the Redis) and deletes its keys when the test ends.
func Prefix(t testing.TB, addr string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	p := "batchertest:" + name + ":" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		c := Client(addr)
		defer func() { _ = c.Close() }()
		ctx := context.Background()
		for _, pat := range []string{p + "*", "{" + p + "*"} {
			it := c.Scan(ctx, 0, pat, 100).Iterator()
			for it.Next(ctx) {
				c.Del(ctx, it.Val())
			}
		}
	})
	return p
}

// Client returns a plain client of the Redis at addr, for tests to look at
// keys; close it.
func Client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: time.Second, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Proxies starts n TCP proxies to addr, closed when the test ends: a test
// cuts one replica's Redis by closing its proxy.
func Proxies(t testing.TB, addr string, n int) []*tcpproxy.Proxy {
	t.Helper()
	pxs := make([]*tcpproxy.Proxy, n)
	for i := range pxs {
		px, err := tcpproxy.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		pxs[i] = px
	}
	return pxs
}
