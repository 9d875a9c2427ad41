package config

import (
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/cache"
)

// Cache is the response cache (package cache): in memory, with the
// fleet's Redis behind it when fleet.redis_url is set.
type Cache struct {
	// Off turns the cache off. Default false: on, for every route whose
	// own cache settings do not turn it off.
	Off bool `yaml:"off"`
	// MaxBytes bounds the memory of the routes without a budget of their
	// own (routes[].cache.max_bytes). Default cache.DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// LocalOnly keeps the cache in memory even with a fleet: replicas do
	// not share answers. Default false.
	LocalOnly bool `yaml:"local_only"`
}

// RouteCache is a route's use of the response cache (batcher.RouteCache).
type RouteCache struct {
	// Off: nothing of this route is cached.
	Off bool `yaml:"off"`
	// TTL of an answer. Default batcher.DefaultCacheTTL.
	TTL Duration `yaml:"ttl"`
	// MaxBytes: a memory budget of the route's own. Default 0: the shared
	// one (cache.max_bytes).
	MaxBytes int64 `yaml:"max_bytes"`
	// SeedReproducible: the upstream answers a seeded request alike every
	// time, so seeded requests are cached at any temperature.
	SeedReproducible bool `yaml:"seed_reproducible"`
	// Shared: every tenant reads what any tenant stored on this route.
	Shared bool `yaml:"shared"`
}

func defaultCache() Cache { return Cache{MaxBytes: cache.DefaultMaxBytes} }

func init() {
	settings = append(settings,
		setting{"cache.off", "cache-off", "BATCHER_CACHE_OFF", "turn the response cache off", boolSetter(func(c *Config) *bool { return &c.Cache.Off })},
		setting{"cache.max_bytes", "cache-max-bytes", "BATCHER_CACHE_MAX_BYTES", "memory of the response cache shared by routes without their own", func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return err
			}
			c.Cache.MaxBytes = n
			return nil
		}},
		setting{"cache.local_only", "cache-local-only", "BATCHER_CACHE_LOCAL_ONLY", "keep the response cache in memory even with a fleet", boolSetter(func(c *Config) *bool { return &c.Cache.LocalOnly })},
	)
	extraDefaults["cache.off"] = func(c *Config) string { return strconv.FormatBool(c.Cache.Off) }
	extraDefaults["cache.max_bytes"] = func(c *Config) string { return strconv.FormatInt(c.Cache.MaxBytes, 10) }
	extraDefaults["cache.local_only"] = func(c *Config) string { return strconv.FormatBool(c.Cache.LocalOnly) }
}

func boolSetter(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return err
		}
		*field(c) = b
		return nil
	}
}

func (c *Cache) validate(e *errs) {
	if !c.Off && c.MaxBytes < 1 {
		e.add("cache.max_bytes", "must be at least 1, got %d", c.MaxBytes)
	}
}

// Options returns the cache's options for the settings (Redis and the
// meter are the caller's).
func (c *Cache) Options() []cache.Option { return []cache.Option{cache.WithMaxBytes(c.MaxBytes)} }
