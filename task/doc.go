// Package task runs one task: partition N of every input topic of a
// transformer, with its transactional producer, its store and its
// changelog partition. Users run transformers through
// runner.NewTransformer, whose engine runs the tasks; a Task runs a
// process.Processor, the contract package transformer implements.
//
// Files: batch.go runs a batch (Process, through internal/batch, the batch
// semantics shared with transformertest); open.go holds the open
// transaction that spans batches (Add, CommitOpen, the overlay of
// uncommitted state); task.go holds the lifecycle (Start, Restore, Close)
// and Commit, a one-batch transaction kept for tests that drive a Task
// directly.
//
// Lifecycle (the order is what makes handovers safe):
//
//  1. Start creates the producer with the static transactional ID
//     {application id}-{N} and initializes its producer ID: the fence.
//  2. Restore brings the store up to the last stable offset of changelog
//     partition N, read_committed (final only after step 1): from the
//     store's checkpoint when it is usable, else in full.
//  3. The caller positions its consumer at the committed offset, read
//     with require-stable semantics after step 1, and resumes fetching.
//  4. Process runs a batch with the semantics of internal/batch: records
//     are bucketed by state key; buckets run concurrently (bounded by a
//     semaphore shared by all tasks), records of one bucket serially in
//     input-topic then offset order. State is read from the open
//     transaction's overlay, then the store.
//  5. Add puts the batch into the open transaction (begun with the first
//     batch that writes something, which joins the group's offsets
//     partition at once, AddOffsetsToTxn, before any record is sent): its
//     outputs are produced at once, its state writes join the overlay
//     (last write per key), its offsets the transaction's offsets.
//  6. CommitOpen, at the end of the commit interval, a bound, a revocation
//     or a stop, adds the overlay's changelog records and the offsets and
//     ends the transaction after checking every record's result (at
//     commit only TxnOffsetCommit and EndTxn remain); only then
//     does the overlay reach the store, with the store's checkpoint in the
//     same batch. An abort drops the overlay.
//
// # Named stores and timers
//
// A process.Stores processor has, beside the default store (changelog
// Config.Changelog, directory store.Dir), a store per named store
// (changelog.StoreTopic, store.NamedDir) and, when it sets timers, the
// timer store TimersStore (changelog.TimersTopic). Restore restores each
// from its own changelog after the fence; each keeps its own checkpoint.
// The open transaction keeps an overlay per store and one of timer
// operations: a batch reads them through a process.State (Get, and Scan
// merged in key order with the store) and the due timers through the
// batch's Due (merged in due order, then timer key bytes, with the timer
// store's due index; the overlay's due timers cost nothing while the
// batch's horizon is before the earliest of them). The stream time (the
// largest record timestamp the task processed) is restored from the
// timer store and written to the timers changelog (store.StreamTimeKey)
// in every transaction that moved it, so a batch that only moved it is
// not empty. CommitOpen sends every store's changelog records and the
// timers' in the one transaction, then applies each store with the offset
// after its own records. Tick runs a batch without records that fires the
// due timers; the engine calls it while TimersDue holds (else when
// NextWallDue has passed) and the task has no records queued (records
// fire due timers themselves).
//
// Batches that wrote nothing open no transaction: an offsets-only
// transaction would never be ended by the client, so when a whole interval
// wrote nothing its offsets are committed by the caller through the group
// member's generation-checked commit (OffsetsCommitted). A transaction's
// offsets carry the same member's id and generation (Config.Member,
// KIP-447), so both commit paths of a partition are fenced by the group
// generation as well as the transactional ID's epoch: a zombie whose late
// fence gave it the newest epoch, but whose member left the group, cannot
// commit.
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
// Store reads (of the buckets of a batch) do not take the lock Commit and
// Close take: a Scan's callback may read again. Close waits for the reads
// in progress before it closes the stores, and refuses later ones; a Scan
// reads in passes of a few hundred entries and calls its callback (user
// code) between them, so Close never waits for user code.
//
// The transformer engine (behind runner.NewTransformer) starts the tasks;
// a test or a tool can drive a Task directly with any process.Processor
// (package task/process, the contract a task runs). The batch semantics are in
// batch.go (internal/batch), the lifecycle and the transaction
// (internal/txn) in task.go.
package task
