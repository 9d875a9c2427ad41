package security

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/batcherhq/batcher/batcher"
)

func TestTenantsPolicies(t *testing.T) {
	ts, err := ParseTenants(tenantsYAML(newToken(t), newToken(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := []batcher.TenantPolicy{
		{Name: "search", Weight: 3, Quotas: batcher.TenantQuotas{RPM: 600, TPM: 100000, QueueShare: 0.5, InFlight: 64}},
		{Name: "batch", Weight: 1},
	}
	if got := ts.Policies(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Policies() = %+v, want %+v", got, want)
	}
}

// TestOnTenantsRefusesWhole: a tenants file the hook refuses is refused
// whole, as a bad file is, and the old tenants stay.
func TestOnTenantsRefusesWhole(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tenants.yaml")
	writeFile(t, file, tenantsYAML(newToken(t), newToken(t)))
	s, err := New(Config{TenantsFile: file, ReloadInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seen [][]string
	refuse := false
	if err := s.OnTenants(func(ts *Tenants) error {
		if refuse {
			return errors.New("no")
		}
		seen = append(seen, ts.Names())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || !reflect.DeepEqual(seen[0], []string{"search", "batch"}) {
		t.Fatalf("called with %v, want the tenants in force", seen)
	}
	writeFile(t, file, []byte("tenants:\n  - name: solo\n    jwt_subjects: [s]\n"))
	refuse = true
	if err := s.Reload(); err == nil {
		t.Fatal("a refused reload returned no error")
	}
	if got := s.Authenticator().Tenants().Names(); !reflect.DeepEqual(got, []string{"search", "batch"}) {
		t.Fatalf("tenants %v after a refused reload, want the old ones", got)
	}
	refuse = false
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || !reflect.DeepEqual(seen[1], []string{"solo"}) {
		t.Fatalf("called with %v", seen)
	}
}
