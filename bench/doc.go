// Package bench holds Batcher's benchmarks: the core against peer batch
// libraries, the gRPC layer against bare echo services, and the heap cost of
// a queued request. It is its own module so that the service does not depend
// on the peers it is measured against. See README.md for how to run it.
package bench
