//go:build !unix

package runner

import "time"

// cpuTime returns false: the process's CPU time is not read here.
func cpuTime() (time.Duration, bool) { return 0, false }
