// Package txn is the one transaction path of the engine: a producer with a
// static transactional ID (fenced on open) that commits a set of records —
// outputs and changelog writes — and, for a transformer task, the group's
// offsets, atomically. Begin, produce with every result checked, offsets
// (AddOffsetsToTxn + TxnOffsetCommit; a Txn that spans calls joins the
// offsets partition when it opens, Txn.AddOffsets, so that its commit only
// sends TxnOffsetCommit), end, abort with its own time, the
// classification of fenced producers and the partitioner are here once.
//
// Callers: package task (a transformer task's batch) and the extractor
// engine (an ownership token's page). Neither is a user; the package is
// internal.
package txn
