package fleet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults.
const (
	DefaultPrefix    = "batcher"
	DefaultHeartbeat = time.Second
	DefaultTTL       = 5 * time.Second
	// DefaultTimeout bounds each Redis command: past it the replica goes
	// to its local share rather than hold batches up.
	DefaultTimeout = 300 * time.Millisecond
)

// Option configures a Fleet.
type Option func(*config)

type config struct {
	prefix    string
	id        string
	heartbeat time.Duration
	ttl       time.Duration
	timeout   time.Duration
	logger    *slog.Logger
	mp        metric.MeterProvider
	info      map[string]string
}

// WithPrefix sets the key prefix the fleet's keys share: replicas with one
// prefix are one fleet. Default DefaultPrefix; empty fails New.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithReplicaID names this replica. Default: host name, process id and a
// random suffix. It must not contain '|'.
func WithReplicaID(id string) Option { return func(c *config) { c.id = id } }

// WithHeartbeat sets how often the replica says it is alive and renews its
// leases. Default DefaultHeartbeat; it must be under a third of the TTL.
func WithHeartbeat(d time.Duration) Option { return func(c *config) { c.heartbeat = d } }

// WithTTL sets how long a replica counts as alive, and its leases hold,
// after its last heartbeat: a dead replica's slots come back within it.
// Default DefaultTTL.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithTimeout bounds each Redis command (dial, read, write). Default
// DefaultTimeout; at least 1 ms. It applies to clients Open makes; a
// client passed to New keeps its own, which should be as short.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithLogger sets where the fleet logs leaving for local mode and
// rejoining. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMeterProvider records the fleet's metrics. Default none.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithInfo describes this replica to the others (its addresses, for the
// status page).
func WithInfo(kv map[string]string) Option { return func(c *config) { c.info = kv } }

func resolve(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, heartbeat: DefaultHeartbeat, ttl: DefaultTTL, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&c)
	}
	var errs []error
	if c.prefix == "" {
		errs = append(errs, errors.New("fleet prefix: must not be empty"))
	}
	if c.id == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.id = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	for _, r := range c.id {
		if r == '|' {
			errs = append(errs, fmt.Errorf("fleet replica id: must not contain '|', got %q", c.id))
			break
		}
	}
	if c.ttl < 3*c.heartbeat || c.heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("fleet heartbeat: must be positive and under a third of the TTL %v, got %v", c.ttl, c.heartbeat))
	}
	if c.timeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("fleet timeout: must be at least 1ms, got %v", c.timeout))
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, errors.Join(errs...)
}
