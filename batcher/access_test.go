package batcher

import (
	"errors"
	"testing"
)

func TestAccessAdmit(t *testing.T) {
	revoked := make(chan struct{})
	close(revoked)
	restricted := &Access{Tenant: "r", Routes: []string{"embed"}, MaxPriority: PriorityLow, PriorityMode: PriorityRefuse}
	lower := &Access{Tenant: "l", MaxPriority: PriorityNormal}
	for _, tc := range []struct {
		name   string
		a      *Access
		route  string
		p      Priority
		want   error
		wantP  Priority
		tenant string
	}{
		{"nil admits all", nil, "chat", PriorityUrgent, nil, PriorityUrgent, ""},
		{"allowed route at the ceiling", restricted, "embed", PriorityLow, nil, PriorityLow, "r"},
		{"allowed route below the ceiling", restricted, "embed", PriorityDeferrable, nil, PriorityDeferrable, "r"},
		{"forbidden route", restricted, "chat", PriorityDeferrable, ErrForbidden, PriorityDeferrable, ""},
		{"above the ceiling, refuse", restricted, "embed", PriorityNormal, ErrForbidden, PriorityNormal, ""},
		{"above the ceiling, lower", lower, "any", PriorityUrgent, nil, PriorityNormal, "l"},
		{"at the ceiling, lower", lower, "any", PriorityNormal, nil, PriorityNormal, "l"},
		{"revoked", restricted.WithRevoked(revoked), "embed", PriorityLow, ErrRevoked, PriorityLow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Request{Route: tc.route, Priority: tc.p}
			err := tc.a.Admit(r)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Admit = %v, want %v", err, tc.want)
			}
			if r.Priority != tc.wantP || r.Tenant != tc.tenant {
				t.Fatalf("request after Admit: priority %v tenant %q, want %v %q", r.Priority, r.Tenant, tc.wantP, tc.tenant)
			}
		})
	}
	var ae *AccessError
	if err := restricted.Admit(&Request{Route: "chat"}); !errors.As(err, &ae) || err.Error() != `forbidden: tenant "r" may not use route "chat"` {
		t.Fatalf("route error %v", err)
	}
	if err := restricted.Admit(&Request{Route: "embed", Priority: PriorityHigh}); err == nil ||
		err.Error() != `forbidden: priority high is above tenant "r"'s ceiling low` {
		t.Fatalf("priority error %v", err)
	}
	if !(*Access)(nil).Unrestricted() || restricted.Unrestricted() || !(&Access{MaxPriority: PriorityUrgent}).Unrestricted() {
		t.Fatal("Unrestricted")
	}
}
