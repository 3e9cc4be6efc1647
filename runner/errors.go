package runner

import (
	sinkengine "github.com/flechtwerk/flechtwerk/internal/engine/sink"
	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
)

// The errors that end Run are defined by the engines that return them and
// named here, as aliases: errors.As with a *runner.BatchTimeoutError (and
// the others) matches them.

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
//
// Fields: Partitions are the tasks whose batch did not finish, in order;
// Timeout is the BatchTimeout that passed; FirstOffsets are the first
// offset not committed per task and input topic (where the aborted
// transaction began).
type BatchTimeoutError = transform.BatchTimeoutError

// TaskTimeoutError ends Run when a task kept failing with transient broker
// errors, and was re-initialized after each, without one successful commit
// for longer than TaskTimeout (or when the group member could not rejoin
// its group, or a startup step kept failing, for that long: Partition is
// then -1 and Step says which). Nothing the task did not commit is visible;
// its records are redelivered when it runs again. errors.Is(err,
// flechtwerk.ErrTaskTimeout) holds, and the last cause stays in the chain.
//
// Fields: Partition is the task's partition number (-1 for the group or a
// startup step); Step names what kept failing when Partition is -1;
// Restarts is how many times the task was re-initialized meanwhile;
// Timeout is the TaskTimeout that passed; Err is the last transient error.
type TaskTimeoutError = transform.TaskTimeoutError

// OffsetFetchError ends Run when a sink could not fetch the group's
// committed offsets, at startup or when it was assigned partitions. Run
// never falls back to the reset policy in that case: that would silently
// re-read (or skip) what the group already committed. errors.Is matches
// flechtwerk.ErrOffsetFetch.
//
// Fields: Group names the group; Topic and Partition name the partition
// whose offset failed, when the failure was one partition's (Topic is
// empty for the request); Err is the cause.
type OffsetFetchError = sinkengine.OffsetFetchError
