// Package race says whether the binary was built with the race detector
// (go build -race), for the tests that must know: the detector makes
// sync.Pool drop a share of what is put back, so allocation counts do not
// hold, and a binary a test builds is built the way the test was.
package race
