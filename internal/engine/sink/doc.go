// Package sink is the sink engine: what runs a sink stage (package sink)
// once package runner has checked its options.
//
// Run checks the input topics and that the group's committed offsets can be
// fetched (never a silent fall back to the reset policy: an
// flechtwerk.OffsetFetchError ends Run instead), joins the group and runs the
// poll-write-commit loop (sink.go). At-least-once, a record's offset is
// committed only once every output it produced was written: package acks
// tracks the written offsets and proposes the commits. At-most-once, the
// offsets are committed before the batch is written. Writes follow the
// SinkRetry policy (retry.go); invalid records the InvalidRecords policy.
//
// Only package runner calls it.
package sink
