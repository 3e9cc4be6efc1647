//go:build unix

package runner

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) the process has used,
// and false where it cannot be read.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
