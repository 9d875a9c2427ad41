package bench

import (
	"os"
	"testing"
)

func BenchmarkZZOne(b *testing.B) {
	st := setupBatcherd
	if os.Getenv("ZZS") == "grpc" {
		st = setupGRPC
	}
	t := serveBatcher(b, st)
	defer t.stop()
	load := unaryLoadOf
	if os.Getenv("ZZK") == "stream" {
		load = streamLoadOf
	}
	alternate(b, load, t)
}
