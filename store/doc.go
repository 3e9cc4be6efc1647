// Package store is the local state of one task: a Pebble database under
// {state dir}/{application id}/{partition}.
//
// A store holds only state that Kafka has committed. The runtime writes it
// after the task's transaction committed (Apply), and rebuilds it from the
// task's changelog partition when the task starts (Open, then Apply in
// batches while restoring). It is a cache of the changelog, never a source
// of truth: a store left behind by a crash is wiped, not trusted.
//
// # Locking
//
// Every opener of a store directory holds an exclusive lock on it before it
// reads, wipes or writes anything, and keeps it until Close: the lock file
// {partition}.lock beside the directory, locked with flock(2) (LockFileEx
// on Windows). Two processes sharing a state directory, say a paused zombie
// and the task's new owner, therefore never touch one store at the same
// time. The lock belongs to the open file, so two Stores in one process
// exclude each other as well, and the kernel drops it when its process
// dies: a crash leaves no stale lock. An opener that finds the lock held
// retries for Options.LockWait (5s by default, long enough for a previous
// owner in the same process to finish closing) and then fails with a
// *LockedError naming the directory, having touched nothing. Wiping is a
// separate step under the lock; the lock file outlives it.
//
// # Retention
//
// Closing a store does not delete it: a store kept on disk is what a warm
// restart of the task would start from. Open and Close set the directory's
// modification time, so its age is the time since it was last used. Prune
// deletes the stores of one application that are older than a given age,
// each only under its lock, taken without waiting: an open store is never
// deleted, however old. The runner prunes at the start of Run and then
// periodically (runner.StoreRetention).
//
// # Concurrency
//
// Get may be called concurrently with itself. Apply and Close must not run
// concurrently with any other method. A second Close is a no-op. Open and
// Prune may be called from any goroutine or process; the locks order them.
package store
