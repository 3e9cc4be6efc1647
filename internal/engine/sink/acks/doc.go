// Package acks tracks which fetched Kafka records have been durably
// written by a sink outside Kafka (a database, an HTTP API), and decides
// which offset of each partition may be committed to the consumer group.
// It is the commit tracker of the at-least-once delivery mode (see "Sinks
// outside Kafka" in docs/concepts.md): a crash re-delivers what was not yet
// committed, and nothing is committed before it is written.
//
// # The record life cycle
//
// The source calls Register for every fetched record before handing it on,
// in offset order per partition, and gets a Ticket. A record starts with
// one outstanding output (the record itself). A step that changes the
// record count calls FanOut(ticket, k): the outstanding output is replaced
// by k outputs, so a record that produced nothing (k = 0) is released at
// once and one that produced three needs three completions. Each terminal
// branch calls Done(ticket) once the output it wrote is durable; the record
// is complete when its last outstanding output is done.
//
// # The watermark
//
// Per partition the committable offset is the lowest registered offset that
// is not complete or, when nothing is outstanding, the fetch position: one
// past the highest registered offset, or further when Advance reports that
// the consumer's position moved past offsets that never arrive as records
// (transaction markers, compacted gaps, skipped tombstones). Offsets that
// were never registered are never waited on: registered offsets 0, 1, 5, 6
// with 0 and 5 done commit 1, and once 1 is done too, 6.
//
// The committed offset seen when a partition is assigned is a floor: a
// replay of older records (recovery state behind the group) re-processes
// them but never proposes an offset below the floor.
//
// # Commits
//
// The tracker does not talk to Kafka. Its caller commits:
//
//   - Changed, once per poll cycle: the partitions whose committable offset
//     moved since it was last reported, for one asynchronous group commit.
//     CommitFailed puts an offset whose commit failed back into the next
//     Changed.
//   - Keepalive: the partitions whose offset has not been reported for
//     CommitKeepalive (default 30 minutes), so an idle partition re-commits
//     its offset before the broker's offset retention
//     (offsets.retention.minutes) expires it.
//   - All, on close: every committable offset, for a synchronous final
//     commit.
//
// # Concurrency
//
// A Tracker is safe for concurrent use. Completions (Done, FanOut) usually
// come from sink goroutines while the source registers and the committer
// collects; each partition has its own lock, so completions on different
// partitions do not contend. Register and Done are amortized O(1): each
// partition keeps its outstanding records in a ring in offset order and
// pops completed records from its head.
package acks
