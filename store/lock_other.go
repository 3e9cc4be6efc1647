//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || windows)

package store

import (
	"errors"
	"os"
	"runtime"
)

// lockFile fails: this platform has no flock(2), and a store must not be
// opened without its lock.
func lockFile(*os.File) (held bool, err error) {
	return false, errors.New("store directory locks are not supported on " + runtime.GOOS)
}
