// Package batch holds the batch semantics of a transformer, once: for the
// records of one partition, sort by input-topic order then offset; let
// control records advance the offsets only; bucket the records by state key
// in order of first appearance; run the buckets concurrently (bounded by a
// semaphore) and the records of one bucket serially, each seeing the state
// the previous one left; keep the last state write per key (none for a key
// that had no state and was deleted: no tombstone). Panics of user
// code are recovered into the record's error.
//
// # Stores and timers
//
// A process.Stores processor runs the same way, with ProcessState instead
// of Process and with these semantics (a plain Processor gets none of it
// and pays nothing for it):
//
//   - Stream time: before the batch it is Params.View's StreamTime; the
//     stream time at an input record is the largest of that and the
//     timestamps of the batch's records up to it, in run order (topic
//     order, then offset). A record's call reads the stream time at it;
//     Result.StreamTime is the stream time after the batch.
//   - Reads: every call reads Params.View (committed state and the open
//     transaction's writes, as of the batch's start) under its own
//     bucket's earlier writes; the bucket's key's default state is the
//     bucket's current state. Writes of other buckets of the same batch
//     are invisible, so reads do not depend on scheduling.
//   - Timers: those due by the batch's end (Params.Due: event-time ones
//     due by the stream time after the batch, wall-clock ones due by
//     View.Now) go to the buckets of their keys; a key with no record
//     gets a bucket of its own, after the record buckets, ordered by its
//     earliest due timer (then key). In a bucket, before each record the
//     key's pending timers fire whose Due is at most the stream time
//     before that record (event time) or Now (wall clock); after the last
//     record, those due by the stream time after the batch or Now. Due
//     timers of a key fire in (Due, Name) order, whatever their kind. A
//     timer the key's own calls set (or move) fires at the first such
//     point at which it is due, after the call that set it; one they
//     cancel does not fire. A (key, name) fires at most once per batch:
//     set again by its callback at a passed time, it fires in the next
//     batch. A fired timer is cancelled unless a later call sets it again.
//     Timer operations on other keys take effect for later batches only.
//   - Bound: of the due timers of keys without records, a batch takes at
//     most Params.MaxTimers (DefaultMaxTimers), the earliest due (event
//     time before wall clock); the rest fire in later batches and
//     Result.MoreDue says so; the runtime ticks again while a timer is
//     due (task.Task.TimersDue), at most one tick per 10ms. Keys with
//     records keep all their due timers, so the order above holds for
//     them.
//   - A timer callback's outputs without a timestamp get the timer's Due
//     (event time) or View.Now (wall clock); its Op applies to its key's
//     state like a record's.
//   - Result.StoreWrites and Result.Timers keep the last write per store
//     and key, and the last operation per key and name, of the buckets
//     taken in bucket order (then call order), except that a store key's
//     expiry (a fired timer named "\x00ttl:" + store) loses to a write of
//     that store key by any other bucket: its delete, its cancel and its
//     FiredTimers entry are dropped, so the write and its re-arming stand.
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
