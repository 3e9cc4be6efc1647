// Package task runs one task: partition N of every input topic of a
// transformer, with its transactional producer, its store and its
// changelog partition. It is the runtime's: package runner calls it (and
// tests of this module); users run transformers through runner.New, never
// through a Task.
//
// Files: batch.go runs a batch (Process, through internal/batch, the batch
// semantics shared with transformertest); task.go holds the lifecycle
// (Start, Restore, Close) and the transaction (Commit).
//
// Lifecycle (the order is what makes handovers safe):
//
//  1. Start creates the producer with the static transactional ID
//     {application id}-{N} and initializes its producer ID: the fence.
//  2. Restore rebuilds the store from changelog partition N, read_committed,
//     up to the last stable offset (final only after step 1).
//  3. The caller positions its consumer at the committed offset, read
//     with require-stable semantics after step 1, and resumes fetching.
//  4. Process runs a batch with the semantics of internal/batch: records
//     are bucketed by state key; buckets run concurrently (bounded by a
//     semaphore shared by all tasks), records of one bucket serially in
//     input-topic then offset order; state writes are deduplicated to the
//     last write per key.
//  5. Commit makes the batch visible in one transaction: outputs, changelog
//     writes and the input offsets (to the group = application id). Only
//     after the broker confirmed the commit is the store updated.
//
// A batch that wrote nothing (no output, no state change) opens no
// transaction: an offsets-only transaction would never be ended by the
// client (see Batch.Empty), so its offsets are committed by the caller
// through the group member's generation-checked commit instead.
//
// # Concurrency
//
// A Task is used by one goroutine at a time (the runner's batch lock);
// different tasks run concurrently. Process runs the transform concurrently
// across state keys, and recovers a panic in user code (transform, state-key
// function, codec) into a *transformer.ProcessError whose Err is a
// *flechtwerk.PanicError. Close may
// run while a Process abandoned by its caller is still in user code: the
// task then refuses the store read and the Commit that would follow, so an
// abandoned batch never becomes visible. Close aborts an open transaction.
//
// Called by package runner only. The batch semantics are in batch.go
// (internal/batch), the lifecycle and the transaction (internal/txn) in
// task.go.
package task
