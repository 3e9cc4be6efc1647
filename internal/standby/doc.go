// Package standby keeps warm copies of the stores of tasks this instance
// does not own (standby replicas), so that a task moving here replays only
// what its standby has not applied yet.
//
// A standby is a restore that never ends. It keeps every store of a task:
// the default one and each of Config.Stores (named stores, the timer
// store), each with its own changelog topic and checkpoint, restored,
// tailed, wiped and released on its own terms as below; the store of a
// task means each of them. Offsets and Lag report a task's stores summed.
// For each standby task the Manager takes the task's store in the state directory (under its lock,
// like any opener), brings it up to the changelog's last stable offset
// with restore.RecoverUnfenced (internal/restore) (warm from the store's checkpoint when it
// is usable, else wiped and restored in full: the rules of a task restore),
// and then keeps applying the committed changelog records of the
// partition as the active owner commits them, each fetch's writes and the
// checkpoint after them in one Pebble batch (store.ApplyRestored, synced at
// most every SyncEvery). When the task becomes active here, Release
// closes the store; the task opens it warm and replays only the standby's
// lag.
//
// All standby partitions are tailed by one consumer client of the
// Manager's (no group), reading read_committed: records of open
// transactions are never fetched, records of aborted ones never applied,
// and transaction markers only move the checkpoint past them. A standby
// writes nothing to Kafka: it has no producer, no transaction and commits
// no offsets.
//
// A standby does not fence the task's owner, so the last stable offset it
// lists is not final. A store this instance owned until just now carries
// the checkpoint of the owner's last commit, whose markers may not be
// written yet: its checkpoint lies above the last stable offset. Such a
// store is not wiped; the restore lists again (backing off up to a second)
// until the last stable offset reaches the checkpoint, then replays warm.
// Only a checkpoint above the high watermark (ahead of the log itself) is
// wiped.
//
// A standby whose position falls out of the partition's range (records
// deleted below it), whose changelog topic got another ID or whose
// checkpoint grew too old (below) is wiped and restored in full. Every other error is reported to Config.OnError, once,
// naming the changelog topic and partition; the Manager then stops
// applying (the runner ends Run with it).
//
// # Checkpoint time
//
// A checkpoint's Time must not be later than the write time of any record
// at or above its offset (see store.Checkpoint). The active owner of a
// standby's task is not fenced, so when a restore ends at the last stable
// offset a transaction of the owner may be open with records below the
// listing's time: the Manager moves the restore's checkpoint time back by
// the owner's transaction timeout (and a minute for the broker's abort
// check). While tailing, the checkpoint time is the timestamp of the last
// record applied, as in a restore, and every RefreshEvery a standby found
// at the end of its partition (its position at the high watermark, which
// equals the last stable offset: no transaction open) gets the time the
// listing began: nothing above it was written before.
//
// The age rule of changelog.Recover holds while tailing too: a standby
// about to apply records above a checkpoint older than the changelog's
// delete.retention.ms (less a tenth) may have missed a tombstone the log
// cleaner removed meanwhile, so it is wiped and restored in full instead.
//
// # Concurrency
//
// Set, Release, Offsets, Lag and Close are safe for concurrent use. Set
// does not wait for restores (they run on goroutines of the Manager);
// Release waits until the task's store is closed and unlocked. Close stops
// everything and returns once every goroutine of the Manager has exited.
package standby
