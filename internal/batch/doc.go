// Package batch holds the batch semantics of a transformer, once: for the
// records of one partition, sort by input-topic order then offset; let
// control records advance the offsets only; bucket the records by state key
// in order of first appearance; run the buckets concurrently (bounded by a
// semaphore) and the records of one bucket serially, each seeing the state
// the previous one left; keep the last state write per key (none for a key
// that had no state and was deleted: no tombstone). Panics of user
// code are recovered into the record's error.
//
// It is called by package task (state read from the task's store) and by
// package transformertest (state read from its in-memory map), so the test
// driver cannot drift from the runtime. Users never import it. It neither
// produces nor commits.
//
// # Concurrency
//
// Run may be called concurrently; the transformer must be safe for
// concurrent use across state keys, and Params.State is called from
// concurrently running buckets.
package batch
