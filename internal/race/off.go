//go:build !race

package race

// Enabled: the race detector is off.
const Enabled = false
