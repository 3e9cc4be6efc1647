// Package changelog owns the compacted changelog topic that backs each
// task's store.
//
// Every store of a task has a changelog topic of its own, with the same
// partitions and configuration: the default store Topic(app), a named
// store StoreTopic(app, name), the timer store TimersTopic(app). One
// topic per store, as compaction is by key: stores sharing a topic would
// need key prefixes that existing keys cannot be guaranteed to avoid.
// What follows holds for each of them.
//
// The changelog has exactly as many partitions as the inputs: task N writes
// its state changes to partition N explicitly (never by key hash) inside its
// transaction, a delete is a tombstone (nil value), and a task restores its
// store by reading partition N with read_committed isolation up to the
// last stable offset, so an aborted or still-open transaction's writes are
// never restored. Recover reads from the store's checkpoint when it is
// usable (a warm restart: only the tail is replayed), from the log start
// otherwise; see Recover for when a checkpoint is unusable.
//
// A task's commit records its checkpoint after EndTxn succeeded:
//
//	next, ok := changelog.NextOffset(producedRecords, topic, partition)
//	if ok { err = st.ApplyThrough(stateWrites, next) } // else: nothing to apply
//
// next is the offset after the transaction's last changelog record; its
// commit marker lies at or above it and a replay skips it. A checkpoint
// behind the state is harmless (records replay idempotently), one ahead of
// it would lose writes, which is why it is taken from the produced offsets
// and only after the commit.
//
// Restore must run after the task's fence (package fencing): only then can
// no earlier owner extend the partition, and the last stable offset is
// final. The engine's standby replicas, which do not fence, read with
// their own variant (internal/restore), which does not take a checkpoint
// above a last stable offset that is not final for a reason to wipe the
// store.
//
// # Concurrency
//
// The functions are safe for concurrent use on different partitions.
//
// Users and tools call Topic (the topic of an application), Ensure (create
// it as the runner would), Restore or Recover (read a partition into a
// store, e.g. to inspect an application's state), Record and NextOffset
// (write state changes as a task does), and ResetMarker (recognize a state
// reset). The engine's own readers (standby replicas) use internal/restore.
package changelog
