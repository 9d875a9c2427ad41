//go:build !race

package batcher

const raceBuild = false
