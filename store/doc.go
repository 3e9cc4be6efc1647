// Package store is the local state of one task: a Pebble database under
// {state dir}/{application id}/{partition} (Dir), and one more per named
// store of the task under {partition}.{name} (NamedDir), each with its
// own changelog topic, checkpoint and lock.
//
// # Timer stores
//
// A store opened with Options.Timers (the named store "timers") holds the
// task's timers: key TimerKey(state key, timer name), value
// TimerValue(kind, due), and the task's stream time under StreamTimeKey.
// Beside these records it keeps an index by (kind, due time, TimerKey),
// written in the same Pebble batch by every apply path: a write reads the
// key's previous value (the database's, or an earlier write of the same
// batch) and moves its index entry. Writing a record the store already
// holds changes nothing, so replays of the changelog (restores, standbys)
// leave the index exact. Due walks the index from one seek: finding the k
// timers due costs a seek plus k entries, however many timers the store
// holds. The index is not in the changelog; it is rebuilt by any restore.
//
// A store holds only state that Kafka has committed. The runtime writes it
// after the task's transaction committed (ApplyThrough) and while
// restoring it from the task's changelog partition (changelog.Recover). It
// is a cache of the changelog, never a source of truth.
//
// # Checkpoint and metadata
//
// Every batch of committed state carries, in the same Pebble batch, the
// store's checkpoint: the changelog topic's ID, the changelog offset to
// replay from (every committed record below it is in the store) and a
// wall time below the write time of every record above it. The store's
// metadata, written when it is created, holds the layout version (Layout)
// and the application id. Open keeps a store whose metadata matches (a
// layout it reads: Layout, or 1, kept in layout 1 until it is wiped) and
// wipes any other, logging why: no metadata (a store of the layout before
// version 1), another layout version, another application id, or files
// Pebble cannot open. Whether a kept checkpoint is usable (same topic ID,
// inside [log start, last stable offset], younger than delete.retention.ms)
// is decided by changelog.Recover, which replays only the changelog above
// it or wipes the store (Reset) and restores it in full. Apply, which
// writes no checkpoint, is safe too: the store is then ahead of its
// checkpoint, and a replay from the checkpoint writes the same committed
// values again (puts and deletes are last-write-wins, so replaying a
// record twice is harmless; a checkpoint behind the state is safe, one
// ahead of it would not be).
//
// # Crash consistency
//
// The store runs Pebble with its write-ahead log on, and every batch that
// carries a checkpoint is committed with pebble.Sync. A batch is one WAL
// record: Pebble replays the WAL on the next Open and stops at the first
// record that is missing or torn, so any crash leaves a prefix of the
// committed batches, each whole. The checkpoint is in the same batch as
// the state it describes, hence a crash can lose state only together with
// its checkpoint: the reopened store is exactly the state of some earlier
// checkpoint, never ahead of it and never a mix. What is lost is replayed
// again.
//
// Why Sync and not NoSync: SIGKILL ends the process, not the kernel, so
// what the process wrote to its files survives in the page cache. But with
// NoSync, Pebble's WAL writer does not write a partial 32 KiB block to the
// file at all; it waits for the block to fill or for a sync. A SIGKILL
// then loses the last tens of KiB of batches, including a new store's
// metadata (seen: a killed store had an empty WAL), which makes the warm
// restart a full one, or a longer replay. Sync writes and fsyncs each
// committed transaction's batch (about 1 ms here, once per transaction,
// next to a transaction's several broker round trips), so after SIGKILL,
// and after a power loss too, the store holds every ApplyThrough that
// returned, and the replay is only the changelog written since. Batches
// without a checkpoint (Apply) are not synced; losing them is harmless.
//
// With the WAL disabled (this package's choice before layout 1), a crash
// loses every memtable not yet flushed, megabytes of batches: still a
// prefix, since memtables are flushed whole and in order, but Pebble
// documents crash recovery without a WAL as untested, and the replay after
// SIGKILL would be up to a memtable longer.
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
