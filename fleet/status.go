package fleet

import (
	"strconv"
	"time"
)

// Local reports whether the replica is in local mode (Redis unreachable).
func (f *Fleet) Local() bool { return f.local.Load() }

// Replicas returns N as last known.
func (f *Fleet) Replicas() int { return int(f.n.Load()) }

// Counters are the fleet's running counts, for tests and benchmarks.
type Counters struct {
	// RoundTrips to Redis made by bookings (acquire; a waiter makes none
	// while it waits), by their ends (release, or a waiter's leaving the
	// queue) and by heartbeats.
	Acquires, Releases, Heartbeats int64
	// Batches booked through Redis.
	Batches int64
	// LocalModes counts the times this replica went to local mode.
	LocalModes int64
}

// Counters returns the running counts.
func (f *Fleet) Counters() Counters {
	return Counters{
		Acquires: f.trips[opAcquire].Load(), Releases: f.trips[opRelease].Load(),
		Heartbeats: f.trips[opHeartbeat].Load(), Batches: f.batches.Load(),
		LocalModes: f.leaves.Load(),
	}
}

// Status is the fleet as this replica saw it at its last heartbeat.
type Status struct {
	Self     string
	Redis    bool // reachable at the last heartbeat; false: local mode
	Members  []Member
	Backends []BackendStatus
}

// Member is one replica.
type Member struct {
	ID   string
	Self bool
	Info map[string]string // what it said of itself (addresses, when it joined)
}

// BackendStatus is one backend's shared budget.
type BackendStatus struct {
	Name string
	// Factor is the adaptive factor on configured rates (1: as configured).
	Factor float64
	// PausedUntil and OpenUntil: a Retry-After, a breaker held open.
	PausedUntil, OpenUntil time.Time
	// RPMLeft and TPMLeft: what the shared buckets hold now (negative:
	// booked ahead); NaN without a budget.
	RPMLeft, TPMLeft float64
	// RPMUsed and TPMUsed: requests and tokens booked per minute over the
	// last heartbeat interval, by the whole fleet.
	RPMUsed, TPMUsed float64
	// Leases held, by replica id.
	Leases map[string]int
	// booked counters and when read, for the rates.
	rs, ts int64
	at     time.Time
}

// Status returns the fleet as last seen.
func (f *Fleet) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	st.Self = f.cfg.id
	st.Redis = !f.local.Load()
	st.Members = append([]Member(nil), st.Members...)
	st.Backends = append([]BackendStatus(nil), st.Backends...)
	return st
}

func withRates(bs []BackendStatus, prev Status) []BackendStatus {
	for i := range bs {
		for _, p := range prev.Backends {
			if p.Name != bs[i].Name || p.at.IsZero() {
				continue
			}
			if d := bs[i].at.Sub(p.at).Minutes(); d > 0 {
				bs[i].RPMUsed = float64(bs[i].rs-p.rs) / d
				bs[i].TPMUsed = float64(bs[i].ts-p.ts) / d
			}
		}
	}
	return bs
}

func parseFloat(v any) (float64, bool) {
	s, ok := v.(string)
	if !ok || s == "" {
		return 0, false
	}
	x, err := strconv.ParseFloat(s, 64)
	return x, err == nil
}
