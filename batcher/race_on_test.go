//go:build race

package batcher

// raceBuild: the race detector is on; sync.Pool then drops a share of
// what is put back, so allocation counts do not hold.
const raceBuild = true
