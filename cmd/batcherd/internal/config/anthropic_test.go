package config_test

import (
	"io"
	"strings"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

func TestAnthropicBackendConfig(t *testing.T) {
	const backends = "backends:\n  - {name: claude, type: anthropic, anthropic: %s}\n"
	const route = "routes:\n  - {name: c, operation: %s, backend: claude}\n"
	for _, tc := range []struct {
		name, section, op, want string
	}{
		{"defaults", "{}", "chat", ""},
		{"bad version", "{version: latest}", "chat", `backends[0].anthropic.version: must be an anthropic-version date such as 2023-06-01, got "latest"`},
		{"reserved header", "{headers: {x-api-key: k}}", "chat", `backends[0].anthropic.headers["x-api-key"]: must not be a header the backend sets itself`},
		{"negative max_tokens", "{max_tokens: -1}", "chat", `backends[0].anthropic.max_tokens: must not be negative`},
		{"bad base_url", "{base_url: 'ftp://x'}", "chat", `backends[0].anthropic.base_url: must use scheme http or https`},
		{"embedding route", "{}", "embedding", `routes[0].operation: backend "claude" is of type anthropic, which serves chat only, got "embedding"`},
		{"tls over http", "{base_url: 'http://h', tls: {ca_file: ca.pem}}", "chat", `backends[0].anthropic.tls: only for an https base_url`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := strings.Replace(backends, "%s", tc.section, 1) + strings.Replace(route, "%s", tc.op, 1)
			c, err := config.Parse([]byte(yaml))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				b, err := c.Build()
				if err != nil {
					t.Fatal(err)
				}
				_ = b.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	// An api_key_env whose variable is unset fails at load, naming it.
	yaml := "backends:\n  - {name: claude, type: anthropic, anthropic: {api_key_env: CLAUDE_KEY_UNSET}}\nroutes:\n  - {name: c, operation: chat, backend: claude}\n"
	_, err := config.Load([]string{"--config", writeFile(t, yaml)}, env(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "backends[0].anthropic.api_key_env: environment variable CLAUDE_KEY_UNSET is empty or unset") {
		t.Errorf("unset key: %v", err)
	}
}
