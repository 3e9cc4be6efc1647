package runner

import "github.com/flechtwerk/flechtwerk"

// The errors that end Run are defined in package flechtwerk, beside their
// codes and sentinels, and named here too: errors.As with a
// *runner.BatchTimeoutError (or the others) matches them.

// BatchTimeoutError ends Run when a batch did not finish within
// BatchTimeout: nothing of the task's open transaction is visible, and its
// records are redelivered. See flechtwerk.BatchTimeoutError.
type BatchTimeoutError = flechtwerk.BatchTimeoutError

// TaskTimeoutError ends Run when a task kept failing with transient broker
// errors for longer than TaskTimeout without one successful commit. See
// flechtwerk.TaskTimeoutError.
type TaskTimeoutError = flechtwerk.TaskTimeoutError

// OffsetFetchError ends Run when a sink could not fetch the group's
// committed offsets; Run never falls back to the reset policy then. See
// flechtwerk.OffsetFetchError.
type OffsetFetchError = flechtwerk.OffsetFetchError
