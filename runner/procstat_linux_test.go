//go:build linux

package runner

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// processConns counts the process's established TCP connections to a
// port of ports, from /proc: the sockets of /proc/self/fd, looked up in
// /proc/self/net/tcp and tcp6 by inode. -1 when /proc cannot be read.
func processConns(ports map[int]bool) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	own := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			own[strings.TrimSuffix(inode, "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		s.Scan() // the header
		for s.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(s.Text())
			if len(fs) < 10 || fs[3] != "01" || !own[fs[9]] {
				continue
			}
			_, port, ok := strings.Cut(fs[2], ":")
			if p, err := strconv.ParseInt(port, 16, 32); ok && err == nil && ports[int(p)] {
				n++
			}
		}
		f.Close()
	}
	return n
}

// processRSS returns the process's resident memory in bytes from
// /proc/self/status (VmRSS), 0 when it cannot be read.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
