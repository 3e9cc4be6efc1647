package runner

import (
	"fmt"
	"strings"
)

// runState describes what r is doing, for a test whose wait timed out: its
// state and counts, its tasks (running, pending, starting or restoring,
// waiting for their re-seek), the tasks that failed and wait for their
// re-initialization, its standby replicas and the changelog offsets of the
// stores it holds. A part whose lock stays held is reported as such (it
// may be where the runner is stuck) instead of blocking the test.
func runState(r *Runner) string {
	var b strings.Builder
	st, err := r.State()
	fmt.Fprintf(&b, "state %s", st)
	if err != nil {
		fmt.Fprintf(&b, " (%v)", err)
	}
	fmt.Fprintf(&b, "; stats %+v; task starts %v\n", r.Stats(), r.ops.taskStarts())
	q := r.ops.query()
	if q == nil {
		b.WriteString("no run attached (Run not started or ended)\n")
		return b.String()
	}
	b.WriteString(q.Describe())
	return b.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
