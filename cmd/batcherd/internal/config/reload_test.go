package config_test

import (
	"slices"
	"testing"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

// TestNeedsRestart: a reload may change the routes and the backends; any
// other setting it changes is named.
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
`, []string{"queue_capacity"}},
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

// TestBuildReload: a backend whose limits alone changed keeps its
// implementation, one whose other settings changed gets a new one, and the
// plan names what was kept, rebuilt, added and removed.
func TestBuildReload(t *testing.T) {
	running, err := config.Parse([]byte(`backends:
  - {name: keep, type: sim, max_concurrency: 2}
  - {name: change, type: sim}
  - {name: drop, type: sim}
routes: [{name: a, operation: chat, backend: keep}]
`))
	if err != nil {
		t.Fatal(err)
	}
	built, err := running.Build()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = built.Close() }()
	next, err := config.Parse([]byte(`backends:
  - {name: keep, type: sim, max_concurrency: 9, rpm: 600}
  - {name: change, type: sim, sim: {failure_rate: 0.5}}
  - {name: new, type: sim}
routes: [{name: a, operation: chat, backend: change, fallbacks: [{backend: new}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := running.BuildReload(next, built.Impls)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Built.Close() }()
	if !slices.Equal(r.Kept, []string{"keep"}) || !slices.Equal(r.Rebuilt, []string{"change"}) ||
		!slices.Equal(r.Added, []string{"new"}) || !slices.Equal(r.Removed, []string{"drop"}) {
		t.Fatalf("kept %v rebuilt %v added %v removed %v", r.Kept, r.Rebuilt, r.Added, r.Removed)
	}
	if len(r.Backends) != 3 || r.Backends[0].Backend != built.Impls["keep"] || r.Backends[0].MaxConcurrency != 9 || r.Backends[0].RPM != 600 {
		t.Fatalf("kept backend: %+v", r.Backends[0])
	}
	if r.Backends[1].Backend == built.Impls["change"] || r.Built.Impls["change"] == nil {
		t.Fatal("a backend whose sim settings changed kept its implementation")
	}
	if len(r.Routes) != 1 || r.Routes[0].Backend != "change" {
		t.Fatalf("routes: %+v", r.Routes)
	}
	bad, err := config.Parse([]byte(`backends: [{name: keep, type: sim, max_concurrency: -1}]
routes: [{name: a, operation: chat, backend: keep}]
`))
	if err == nil {
		if _, err = running.BuildReload(bad, built.Impls); err == nil {
			t.Fatal("a bad backend was planned")
		}
	}
}
