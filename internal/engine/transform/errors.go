package transform

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flechtwerk/flechtwerk"
)

// BatchTimeoutError ends Run when a batch did not finish within
// BatchTimeout, typically because a transform ignores its ctx. The task it
// names was still transforming at the deadline; its open transaction (the
// batch and the batches before it since the task's last commit) is aborted,
// so nothing of it is visible and its offsets did not advance; the records
// are redelivered when the task runs again. Other tasks may have committed
// theirs. errors.Is(err, flechtwerk.ErrBatchTimeout) holds.
//
// Run does not wait for the goroutines still running the transform: they
// are abandoned. Their results are discarded (the closed task refuses to
// read its store or to commit), and they may keep running until they return
// or the process exits. A transform that can block should honor ctx, whose
// deadline is the batch deadline.
type BatchTimeoutError struct {
	// Partitions are the tasks whose batch did not finish, in order.
	Partitions []int32
	// Timeout is the BatchTimeout that passed.
	Timeout time.Duration
	// FirstOffsets are the first offset not committed per task and input
	// topic: where the aborted transaction began.
	FirstOffsets map[int32]map[string]int64
}

func (e *BatchTimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runner: %s: the batch of ", flechtwerk.CodeBatchTimeout)
	for i, n := range e.Partitions {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "task %d", n)
		topics := make([]string, 0, len(e.FirstOffsets[n]))
		for t := range e.FirstOffsets[n] {
			topics = append(topics, t)
		}
		slices.Sort(topics)
		for j, t := range topics {
			sep := ", "
			if j == 0 {
				sep = " ("
			}
			fmt.Fprintf(&b, "%stopic %s partition %d from offset %d", sep, t, n, e.FirstOffsets[n][t])
		}
		if len(topics) > 0 {
			b.WriteString(")")
		}
	}
	fmt.Fprintf(&b, " did not finish within BatchTimeout %v; nothing of it was committed, its offsets did not advance, and the goroutine still running the transform was abandoned", e.Timeout)
	return b.String()
}

// Is reports whether target is flechtwerk.ErrBatchTimeout.
func (e *BatchTimeoutError) Is(target error) bool { return target == flechtwerk.ErrBatchTimeout }
