package config_test

import (
	"strings"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

// A BATCHER_* variable batcherd does not read is a typo when it is near a
// known one, and fails as an unknown key of the file does; any other is a
// warning, since the project's test knobs share the prefix.
func TestCheckEnviron(t *testing.T) {
	c, err := config.Parse([]byte(`
http:
  tokens_env: BATCHER_FRONT_TOKENS
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		environ []string
		wantErr []string // substrings of the error; none: no error
		warned  []string // variables warned about
	}{
		{name: "none", environ: []string{"HOME=/root", "PATH=/bin"}},
		{name: "known", environ: []string{"BATCHER_LISTEN=127.0.0.1:1", "BATCHER_CONFIG=x.yaml", "BATCHER_REDIS_URL=redis://r", "BATCHER_POSTGRES_DSN=x"}},
		{name: "named by the config", environ: []string{"BATCHER_FRONT_TOKENS=t"}},
		{name: "letter dropped", environ: []string{"BATCHER_LISTN=127.0.0.1:1"}, wantErr: []string{"BATCHER_LISTN: unknown environment variable: did you mean BATCHER_LISTEN?"}},
		{name: "letters swapped", environ: []string{"BATCHER_QUEUE_CAPACTIY=5"}, wantErr: []string{"did you mean BATCHER_QUEUE_CAPACITY?"}},
		{name: "near a named one", environ: []string{"BATCHER_FRONT_TOKEN=t"}, wantErr: []string{"did you mean BATCHER_FRONT_TOKENS?"}},
		{name: "every typo at once", environ: []string{"BATCHER_LISTN=1", "BATCHER_HTTP_LISTN=2"}, wantErr: []string{"BATCHER_LISTN:", "BATCHER_HTTP_LISTN: unknown environment variable: did you mean BATCHER_HTTP_LISTEN?"}},
		{
			name:    "the project's test and benchmark knobs",
			environ: []string{"BATCHER_REQUIRE_SERVICES=1", "BATCHER_REQUIRE_TOOLS=1", "BATCHER_TEST_POSTGRES_DSN=x", "BATCHER_JOBS_BENCH_ITEMS=9", "BATCHER_SLOW_BENCH=1", "BATCHER_ARTIFACTS=/a"},
			warned:  []string{"BATCHER_ARTIFACTS", "BATCHER_JOBS_BENCH_ITEMS", "BATCHER_REQUIRE_SERVICES", "BATCHER_REQUIRE_TOOLS", "BATCHER_SLOW_BENCH", "BATCHER_TEST_POSTGRES_DSN"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := c.CheckEnviron(tc.environ)
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("error %v, want none", err)
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want %q", err, w)
				}
			}
			if len(warnings) != len(tc.warned) {
				t.Fatalf("warnings %q, want one each for %v", warnings, tc.warned)
			}
			for i, name := range tc.warned {
				if warnings[i] != name+": unknown environment variable, ignored (batcherd --help lists every variable)" {
					t.Errorf("warning %q, want one about %s", warnings[i], name)
				}
			}
		})
	}
}
