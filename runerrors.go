package flechtwerk

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flechtwerk/flechtwerk/internal/errchain"
)

// The errors that end a Run. Package runner names them too (as aliases):
// runner.BatchTimeoutError is BatchTimeoutError.

// BatchTimeoutError ends Run when a batch did not finish within
// BatchTimeout (runner.BatchTimeout), typically because a transform ignores its ctx. The task it
// names was still transforming at the deadline; its open transaction (the
// batch and the batches before it since the task's last commit) is aborted,
// so nothing of it is visible and its offsets did not advance; the records
// are redelivered when the task runs again. Other tasks may have committed
// theirs. errors.Is(err, ErrBatchTimeout) holds.
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
	fmt.Fprintf(&b, "runner: %s: the batch of ", CodeBatchTimeout)
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

// Is reports whether target is ErrBatchTimeout.
func (e *BatchTimeoutError) Is(target error) bool { return target == ErrBatchTimeout }

// TaskTimeoutError ends Run when a task kept failing with transient broker
// errors, and was re-initialized after each, without one successful commit
// for longer than TaskTimeout (runner.TaskTimeout; or when the group member could not rejoin
// its group, or a startup step kept failing, for that long: Partition is
// then -1 and Step says which). Nothing the task did not commit is visible;
// its records are redelivered when it runs again. errors.Is(err,
// ErrTaskTimeout) holds, and the last cause stays in the chain.
type TaskTimeoutError struct {
	// Partition is the task's partition number; -1 for the group or a
	// startup step.
	Partition int32
	// Step names what kept failing when Partition is -1.
	Step string
	// Restarts is how many times the task was re-initialized meanwhile.
	Restarts int
	// Timeout is the TaskTimeout that passed.
	Timeout time.Duration
	// Err is the last transient error.
	Err error
}

func (e *TaskTimeoutError) Error() string {
	if e.Partition < 0 {
		return fmt.Sprintf("runner: %s: %s kept failing with transient errors for longer than TaskTimeout %v: %v",
			CodeTaskTimeout, e.Step, e.Timeout, e.Err)
	}
	return fmt.Sprintf("runner: %s: task %d kept failing with transient errors for longer than TaskTimeout %v (re-initialized %d times without a successful commit); nothing it did not commit is visible: %v",
		CodeTaskTimeout, e.Partition, e.Timeout, e.Restarts, e.Err)
}

// Is reports whether target is ErrTaskTimeout.
func (e *TaskTimeoutError) Is(target error) bool { return target == ErrTaskTimeout }

func (e *TaskTimeoutError) Unwrap() error { return e.Err }

// OffsetFetchError ends Run when a sink could not fetch the group's
// committed offsets, at startup or when it was assigned partitions. Run
// never falls back to the reset policy in that case: that would silently
// re-read (or skip) what the group already committed. errors.Is matches
// ErrOffsetFetch.
type OffsetFetchError struct {
	Group string
	// Topic and Partition name the partition whose offset failed, when
	// the failure was one partition's; Topic is empty for the request.
	Topic     string
	Partition int32
	Err       error
}

func (e *OffsetFetchError) Error() string {
	if e.Topic == "" {
		return fmt.Sprintf("runner: %s: fetching the committed offsets of group %q: %v", CodeOffsetFetch, e.Group, e.Err)
	}
	return fmt.Sprintf("runner: %s: fetching the committed offset of group %q for %s[%d]: %v",
		CodeOffsetFetch, e.Group, e.Topic, e.Partition, e.Err)
}

func (e *OffsetFetchError) Unwrap() error { return e.Err }

// Is matches ErrOffsetFetch.
func (e *OffsetFetchError) Is(target error) bool { return target == ErrOffsetFetch }

// OutputError is an output record that could not be produced as asked:
// its partition is not one of its topic's, or its topic's partitioner
// panicked (CodeOutputPartition; Err is then the *PanicError), or its
// typed key or value did not encode (CodeOutputEncode). Nothing is
// skipped: the record's transform call (for an encode error) or its
// task's transaction (for a partition) fails, the transaction is aborted,
// nothing of it is visible and its input offsets did not advance; Run
// ends, and the records are redelivered when the task runs again.
// errors.Is(err, ErrOutputPartition) or errors.Is(err, ErrOutputEncode)
// holds by Code.
type OutputError struct {
	// Code is CodeOutputPartition or CodeOutputEncode.
	Code Code
	// Topic is the output topic.
	Topic string
	// Partition is the partition asked for (CodeOutputPartition).
	Partition int32
	// Partitions is the topic's partition count (CodeOutputPartition); -1
	// when Partition is negative (the topic was not looked at).
	Partitions int32
	// Err is the codec's error (CodeOutputEncode), or the partitioner's
	// panic (CodeOutputPartition; nil for a partition out of range).
	Err error
}

func (e *OutputError) Error() string {
	if e.Code == CodeOutputPartition && e.Err != nil {
		return fmt.Sprintf("flechtwerk: %s: output to topic %s: the topic's partitioner failed: %v; transaction aborted", e.Code, e.Topic, e.Err)
	}
	if e.Code == CodeOutputPartition && e.Partitions < 0 {
		return fmt.Sprintf("flechtwerk: %s: output to topic %s partition %d: a partition is never negative", e.Code, e.Topic, e.Partition)
	}
	if e.Code == CodeOutputPartition {
		return fmt.Sprintf("flechtwerk: %s: output to topic %s partition %d: the topic has %d partitions (0 to %d); transaction aborted",
			e.Code, e.Topic, e.Partition, e.Partitions, e.Partitions-1)
	}
	return fmt.Sprintf("flechtwerk: %s: output to topic %s: %v", e.Code, e.Topic, e.Err)
}

// Unwrap returns Err without the errors that match ErrInvalidRecord: the
// output is not the input record, so no invalid-record policy skips or
// dead-letters the input for it; the codec's other causes stay in the
// chain.
func (e *OutputError) Unwrap() error { return errchain.Without(e.Err, ErrInvalidRecord) }

// Is reports whether target is the sentinel of e's Code.
func (e *OutputError) Is(target error) bool {
	return target == ErrOutputPartition && e.Code == CodeOutputPartition ||
		target == ErrOutputEncode && e.Code == CodeOutputEncode
}
