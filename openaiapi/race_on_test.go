//go:build race

package openaiapi

// raceBuild: the race detector is on, which drops sync.Pool items at
// random, so allocation counts are noise.
const raceBuild = true
