package config_test

import (
	"slices"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

// TestNeedsRestart: a reload may change the routes only; any other
// setting it changes is named.
func TestNeedsRestart(t *testing.T) {
	base := `backends: [{name: sim, type: sim}]
routes: [{name: a, operation: chat, backend: sim}]
`
	running, err := config.Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{base, nil},
		{`backends: [{name: sim, type: sim}]
routes: [{name: b, operation: embedding, backend: sim}, {name: c, operation: chat, backend: sim}]
`, nil},
		{`backends: [{name: sim, type: sim, max_concurrency: 3}]
routes: [{name: a, operation: chat, backend: sim}]
queue_capacity: 7
`, []string{"queue_capacity", "backends"}},
	} {
		next, err := config.Parse([]byte(tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := running.NeedsRestart(next); !slices.Equal(got, tc.want) {
			t.Errorf("%s: NeedsRestart = %v, want %v", tc.yaml, got, tc.want)
		}
	}
	if n := len(running.CoreRoutes()); n != 1 {
		t.Fatalf("%d core routes", n)
	}
}
