package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/batcherhq/batcher/fleet"
)

// Fleet shares the backends' budgets with other batcherd replicas through
// Redis (package fleet). Without a Redis URL batcherd runs alone.
type Fleet struct {
	// RedisURL is redis://[user:password@]host:port/db (rediss:// for TLS).
	// Empty (the default): no fleet. It may hold a password: it is never
	// logged.
	RedisURL string `yaml:"redis_url"`
	// Prefix is the keys' prefix: replicas with one prefix are one fleet.
	// Default fleet.DefaultPrefix.
	Prefix string `yaml:"prefix"`
	// Heartbeat is how often a replica says it is alive and renews its
	// leases; TTL how long it counts as alive after (a dead replica's
	// concurrency slots come back within it). Defaults fleet.DefaultHeartbeat
	// and fleet.DefaultTTL; the heartbeat must be under a third of the TTL.
	Heartbeat Duration `yaml:"heartbeat"`
	TTL       Duration `yaml:"ttl"`
	// Timeout bounds each Redis command; past it the replica serves on its
	// local share (1/N of each budget) until Redis answers. Default
	// fleet.DefaultTimeout.
	Timeout Duration `yaml:"timeout"`
}

func defaultFleet() Fleet {
	return Fleet{Prefix: fleet.DefaultPrefix, Heartbeat: Duration(fleet.DefaultHeartbeat),
		TTL: Duration(fleet.DefaultTTL), Timeout: Duration(fleet.DefaultTimeout)}
}

func init() {
	settings = append(settings,
		setting{"fleet.redis_url", "redis-url", "BATCHER_REDIS_URL", "Redis URL that replicas share budgets through, redis://host:port/db (empty: run alone)", func(c *Config, v string) error { c.Fleet.RedisURL = v; return nil }},
		setting{"fleet.prefix", "fleet-prefix", "BATCHER_FLEET_PREFIX", "Redis key prefix: replicas with one prefix are one fleet", func(c *Config, v string) error { c.Fleet.Prefix = v; return nil }},
		setting{"fleet.heartbeat", "fleet-heartbeat", "BATCHER_FLEET_HEARTBEAT", "how often a replica heartbeats and renews its leases", durSetter(func(c *Config) *Duration { return &c.Fleet.Heartbeat })},
		setting{"fleet.ttl", "fleet-ttl", "BATCHER_FLEET_TTL", "how long a replica and its leases outlive its last heartbeat", durSetter(func(c *Config) *Duration { return &c.Fleet.TTL })},
		setting{"fleet.timeout", "fleet-timeout", "BATCHER_FLEET_TIMEOUT", "bound on each Redis command before serving on the local share", durSetter(func(c *Config) *Duration { return &c.Fleet.Timeout })},
	)
	extraDefaults["fleet.redis_url"] = func(c *Config) string { return c.Fleet.RedisURL }
	extraDefaults["fleet.prefix"] = func(c *Config) string { return c.Fleet.Prefix }
	extraDefaults["fleet.heartbeat"] = func(c *Config) string { return c.Fleet.Heartbeat.String() }
	extraDefaults["fleet.ttl"] = func(c *Config) string { return c.Fleet.TTL.String() }
	extraDefaults["fleet.timeout"] = func(c *Config) string { return c.Fleet.Timeout.String() }
}

func (f *Fleet) validate(e *errs) {
	if f.RedisURL == "" {
		return
	}
	if u, err := url.Parse(f.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		// The URL may hold a password: the message does not repeat it.
		e.add("fleet.redis_url", "must be redis://host:port/db, rediss:// or unix://")
	}
	if strings.TrimSpace(f.Prefix) == "" {
		e.add("fleet.prefix", "must not be empty")
	}
	if f.Heartbeat <= 0 || f.TTL < 3*f.Heartbeat {
		e.add("fleet.heartbeat", "must be positive and under a third of fleet.ttl %v, got %v", f.TTL, f.Heartbeat)
	}
	if f.Timeout.D() < time.Millisecond {
		e.add("fleet.timeout", "must be at least 1ms, got %v", f.Timeout)
	}
}

// Options returns the fleet's options for the settings (the logger, meter
// and info are the caller's).
func (f *Fleet) Options() []fleet.Option {
	return []fleet.Option{fleet.WithPrefix(f.Prefix), fleet.WithHeartbeat(f.Heartbeat.D()),
		fleet.WithTTL(f.TTL.D()), fleet.WithTimeout(f.Timeout.D())}
}
