// Package changelog owns the compacted changelog topic that backs each
// task's store.
//
// The changelog has exactly as many partitions as the inputs: task N writes
// its state changes to partition N explicitly (never by key hash) inside its
// transaction, a delete is a tombstone (nil value), and a task restores its
// store by reading partition N with read_committed isolation from the start
// up to the last stable offset, so an aborted or still-open transaction's
// writes are never restored.
//
// Restore must run after the task's fence (package fencing): only then can
// no earlier owner extend the partition, and the last stable offset is
// final.
//
// # Concurrency
//
// The functions are safe for concurrent use on different partitions.
//
// Called by the engine only: task (restore, records of state writes), the
// extractor engine (cursors) and the runner (Ensure).
package changelog
