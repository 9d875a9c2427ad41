package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
)

// profilesEnv, set to a directory, makes BenchmarkStream2000 and
// BenchmarkStream2000ClientApart write a heap and a goroutine profile of
// this process at each side's two points, settled (tag-before and
// tag-during, the 2,000 chats open): go tool pprof -base
// held-t1-before-heap.pb.gz held-t1-during-heap.pb.gz is what a round
// through batcherd added. Run with GODEBUG=memprofilerate=1 (or a small
// rate) to see every allocation rather than a sample.
const profilesEnv = "BATCHER_BENCH_PROFILES"

// writeProfiles writes this process's heap and goroutine profiles into
// profilesEnv's directory, named for tag, when it is set.
func writeProfiles(tb testing.TB, tag string) {
	dir := os.Getenv(profilesEnv)
	if dir == "" {
		return
	}
	for _, p := range []string{"heap", "goroutine"} {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s.pb.gz", tag, p)))
		if err != nil {
			tb.Fatal(err)
		}
		err = pprof.Lookup(p).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}
