package config

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/batcherhq/batcher/telemetry"
)

// Defaults of the telemetry settings.
const (
	// DefaultAdminListen is the admin HTTP listener: /metrics, the status
	// page, pprof when enabled. Loopback: nothing leaves the host unless
	// the operator says so.
	DefaultAdminListen = "127.0.0.1:9464"
	// DefaultAccessLog is the level of the gRPC access log: off. A record
	// per call costs about a sixth of unary Submit's throughput
	// (BENCHMARKS.md, BenchmarkGRPCLayer), and the metrics count every
	// call by method and code already; server-side failures are logged
	// where they happen (upstream errors, the breaker, panics).
	DefaultAccessLog = "off"
	// DefaultStatsInterval is how often the live views sample.
	DefaultStatsInterval = telemetry.DefaultSampleInterval
	// MinStatsInterval and MaxStatsInterval bound stats_interval.
	MinStatsInterval = 100 * time.Millisecond
	MaxStatsInterval = time.Minute
)

// Telemetry configures metrics, the admin listener and the access log.
// Traces and OTLP export follow the standard OTEL_* variables.
type Telemetry struct {
	// AdminListen is the admin HTTP listener's host:port (port 0 picks a
	// free one), or ListenOff (or empty): no admin listener (then no
	// /metrics and no status page). Default DefaultAdminListen.
	AdminListen string `yaml:"admin_listen"`
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin
	// listener. Default false.
	Pprof bool `yaml:"pprof"`
	// AccessLog is the level the gRPC access log (one record per call)
	// logs at: debug, info, warn, error, or off. Default DefaultAccessLog.
	AccessLog string `yaml:"access_log"`
	// StatsInterval is how often the status page and WatchStats sample.
	// Default DefaultStatsInterval; MinStatsInterval to MaxStatsInterval.
	StatsInterval Duration `yaml:"stats_interval"`
}

func defaultTelemetry() Telemetry {
	return Telemetry{AdminListen: DefaultAdminListen, AccessLog: DefaultAccessLog, StatsInterval: Duration(DefaultStatsInterval)}
}

func init() {
	boolSettings["pprof"] = true // --pprof, without a value
	settings = append(settings,
		setting{"telemetry.admin_listen", "admin-listen", "BATCHER_ADMIN_LISTEN", `admin HTTP listener for /metrics, the status page and pprof, host:port, or "off"`, func(c *Config, v string) error { c.Telemetry.AdminListen = v; return nil }},
		setting{"telemetry.pprof", "pprof", "BATCHER_PPROF", "serve net/http/pprof on the admin listener: true or false", func(c *Config, v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			c.Telemetry.Pprof = b
			return nil
		}},
		setting{"telemetry.access_log", "access-log", "BATCHER_ACCESS_LOG", "gRPC access log level: debug, info, warn, error or off", func(c *Config, v string) error { c.Telemetry.AccessLog = v; return nil }},
		setting{"telemetry.stats_interval", "stats-interval", "BATCHER_STATS_INTERVAL", "how often the status page and WatchStats sample", durSetter(func(c *Config) *Duration { return &c.Telemetry.StatsInterval })},
	)
}

// telemetryDefaultString returns a telemetry setting's default for the
// flags' usage.
func telemetryDefaultString(c *Config, path string) string {
	switch path {
	case "telemetry.admin_listen":
		return c.Telemetry.AdminListen
	case "telemetry.pprof":
		return strconv.FormatBool(c.Telemetry.Pprof)
	case "telemetry.access_log":
		return c.Telemetry.AccessLog
	case "telemetry.stats_interval":
		return c.Telemetry.StatsInterval.String()
	}
	return ""
}

// validate checks the telemetry settings. The admin listener shares the
// gRPC listener's TLS and tenants (sec): an address other than loopback
// needs both, or security.insecure.
func (t *Telemetry) validate(sec *Security, e *errs) {
	if !t.AdminOff() {
		if _, port, err := net.SplitHostPort(t.AdminListen); err != nil {
			e.add("telemetry.admin_listen", "must be host:port or %q, got %q", ListenOff, t.AdminListen)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			e.add("telemetry.admin_listen", "port must be 0 to 65535, got %q", port)
		} else if err := sec.CheckListener("telemetry.admin_listen", t.AdminListen); err != nil {
			*e = append(*e, err)
		}
	}
	if _, _, err := t.AccessLevel(); err != nil {
		e.add("telemetry.access_log", "%v", err)
	}
	if d := t.StatsInterval.D(); d < MinStatsInterval || d > MaxStatsInterval {
		e.add("telemetry.stats_interval", "must be %v to %v, got %v", MinStatsInterval, MaxStatsInterval, d)
	}
}

// AccessLevel returns the access log's level, and false when it is off.
func (t *Telemetry) AccessLevel() (slog.Level, bool, error) {
	if strings.EqualFold(t.AccessLog, "off") {
		return 0, false, nil
	}
	l, err := Log{Level: t.AccessLog}.SlogLevel()
	if err != nil {
		return 0, false, fmt.Errorf("must be debug, info, warn, error or off, got %q", t.AccessLog)
	}
	return l, true, nil
}

// AdminOff reports whether the admin listener is off: admin_listen is
// ListenOff, or empty.
func (t *Telemetry) AdminOff() bool { return t.AdminListen == "" || t.AdminListen == ListenOff }

// AdminLoopback reports whether the admin listener binds to loopback only.
func (t *Telemetry) AdminLoopback() bool {
	host, _, err := net.SplitHostPort(t.AdminListen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
