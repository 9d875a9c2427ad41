package config_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
	"github.com/batcherhq/batcher/fleet"
)

func TestFleetSettings(t *testing.T) {
	file := writeFile(t, "fleet:\n  redis_url: redis://file:6379/0\n  prefix: fromfile\n  ttl: 9s\n")
	for _, tc := range []struct {
		name   string
		args   []string
		env    []string
		url    string
		prefix string
		ttl    time.Duration
	}{
		{"default: alone", nil, nil, "", fleet.DefaultPrefix, fleet.DefaultTTL},
		{"file", []string{"--config", file}, nil, "redis://file:6379/0", "fromfile", 9 * time.Second},
		{"env over file", []string{"--config", file}, []string{"BATCHER_REDIS_URL", "redis://env:6379/1"}, "redis://env:6379/1", "fromfile", 9 * time.Second},
		{"flag over env", []string{"--config", file, "--redis-url", "redis://flag:6379/2", "--fleet-prefix", "p", "--fleet-ttl", "6s"},
			[]string{"BATCHER_REDIS_URL", "redis://env:6379/1"}, "redis://flag:6379/2", "p", 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(tc.args, env(tc.env...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.Fleet.RedisURL != tc.url || c.Fleet.Prefix != tc.prefix || c.Fleet.TTL.D() != tc.ttl {
				t.Fatalf("fleet %+v, want url %q prefix %q ttl %v", c.Fleet, tc.url, tc.prefix, tc.ttl)
			}
		})
	}
}

func TestFleetSettingsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not redis", []string{"--redis-url", "http://user:hunter2@x:1"}, "fleet.redis_url (--redis-url): must be redis://"},
		{"heartbeat too slow", []string{"--redis-url", "redis://x:1", "--fleet-heartbeat", "3s", "--fleet-ttl", "5s"}, "fleet.heartbeat (--fleet-heartbeat): must be positive and under a third"},
		{"empty prefix", []string{"--redis-url", "redis://x:1", "--fleet-prefix", " "}, "fleet.prefix (--fleet-prefix): must not be empty"},
		{"timeout", []string{"--redis-url", "redis://x:1", "--fleet-timeout", "10us"}, "fleet.timeout (--fleet-timeout): must be at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(tc.args, env(), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error repeats the URL's password: %v", err)
			}
		})
	}
}
