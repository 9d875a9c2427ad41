//go:build race

package race

// Enabled: the race detector is on.
const Enabled = true
