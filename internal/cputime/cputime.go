// Package cputime reads the CPU time the process has used, for benchmarks
// that report CPU per operation beside wall time: on a shared machine the
// wall time swings with the load, while the CPU an operation costs does
// not.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the CPU time the process has used, user and system, all
// threads; 0 when the system does not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
