package batcher

// LaneStats is a snapshot of one lane: its queued calls by priority and its
// calls in flight upstream.
type LaneStats struct {
	Name, Route, Backend string
	// Queued counts queued calls by priority name: urgent, high, normal,
	// low, deferrable.
	Queued map[string]int
	// InFlight counts this lane's calls in flight upstream.
	InFlight int
}

// Lanes returns a snapshot of every lane. It is safe to call concurrently
// and cheap: it reads counters each lane's owner keeps in atomics, so the
// figures of one lane may be a moment apart from each other.
func (b *Batcher) Lanes() []LaneStats {
	var out []LaneStats
	b.eachLane(func(l *lane) {
		st := LaneStats{Name: l.name, Route: l.route.Name, Backend: l.be.name, Queued: make(map[string]int, numPriorities)}
		for p := range l.queuedBy {
			st.Queued[Priority(p).String()] = int(l.queuedBy[p].Load())
		}
		st.InFlight = int(l.inFlight.Load())
		out = append(out, st)
	})
	return out
}
