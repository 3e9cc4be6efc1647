//go:build !linux

package runner

// processConns is unknown (-1) off Linux.
func processConns(map[int]bool) int { return -1 }

// processRSS is unknown (0) off Linux.
func processRSS() int64 { return 0 }
