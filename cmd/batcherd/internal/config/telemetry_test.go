package config_test

import (
	"io"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

func TestTelemetrySettings(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    config.Telemetry
		wantErr []string
	}{
		{name: "defaults", want: config.Telemetry{AdminListen: "127.0.0.1:9464", AccessLog: "off", StatsInterval: config.Duration(config.DefaultStatsInterval)}},
		{name: "flags", args: []string{"--admin-listen=0.0.0.0:9000", "--insecure", "--pprof=true", "--access-log=info", "--stats-interval=250ms"},
			want: config.Telemetry{AdminListen: "0.0.0.0:9000", Pprof: true, AccessLog: "info", StatsInterval: config.Duration(250e6)}},
		{name: "env", env: map[string]string{"BATCHER_ADMIN_LISTEN": "", "BATCHER_ACCESS_LOG": "debug"},
			want: config.Telemetry{AccessLog: "debug", StatsInterval: config.Duration(config.DefaultStatsInterval)}},
		{name: "bad", args: []string{"--admin-listen=nowhere", "--access-log=loud", "--stats-interval=1ms", "--pprof=maybe"},
			wantErr: []string{`telemetry.pprof (--pprof): want true or false, got "maybe"`}},
		{name: "network without TLS", args: []string{"--admin-listen=0.0.0.0:9000"},
			wantErr: []string{`telemetry.admin_listen: 0.0.0.0:9000 is not a loopback address`, "--insecure"}},
		{name: "bad values", args: []string{"--admin-listen=nowhere", "--access-log=loud", "--stats-interval=1ms"},
			wantErr: []string{`telemetry.admin_listen (--admin-listen): must be host:port or "off", got "nowhere"`,
				`telemetry.access_log (--access-log): must be debug, info, warn, error or off, got "loud"`,
				`telemetry.stats_interval (--stats-interval): must be 100ms to 1m0s, got 1ms`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(tc.args, env(tc.env), io.Discard)
			if len(tc.wantErr) > 0 {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("err %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Telemetry != tc.want {
				t.Errorf("telemetry %+v, want %+v", c.Telemetry, tc.want)
			}
		})
	}
	c := config.Telemetry{AdminListen: "[::1]:9464"}
	if !c.AdminLoopback() {
		t.Error("[::1] is loopback")
	}
	c.AdminListen = ":9464"
	if c.AdminLoopback() {
		t.Error(":9464 listens on every interface, not loopback")
	}
}
