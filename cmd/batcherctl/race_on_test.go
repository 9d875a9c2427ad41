//go:build race

package main

// raceBuild: the tests run under the race detector, so the binary they
// build is built with it too.
const raceBuild = true
