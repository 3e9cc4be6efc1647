// Package runner runs a transformer or an extractor with exactly-once
// delivery: New(stage, opts...) takes a *transformer.Transformer or an
// *extractor.Extractor, with the options of both kinds (SeedBrokers,
// ApplicationID, StateDir, TransactionTimeout, Concurrency, ...) and those
// of its own kind (a transformer's InputTopics, MaxPollRecords,
// BatchTimeout; an extractor's ConfigTopics, PollInterval, PageTimeout,
// TombstonedCursors). An option of the other kind is a configuration
// error. See package extractor for how an extractor runs; the rest of this
// page is about transformers. The files: runner.go (New, Run, Wake),
// options.go, transform.go (a transformer's startup), loop.go (the main
// loop and the per-task workers), rebalance.go (group callbacks),
// commit.go (offsets of intervals that wrote nothing), stores.go
// (StoreRetention).
//
//	r, err := runner.New(counter,
//		runner.SeedBrokers("localhost:9092"),
//		runner.ApplicationID("wordcount"),
//		runner.InputTopics("words"),
//	)
//	if err != nil { ... }          // every configuration problem, coded
//	err = r.Run(ctx)                // until ctx is canceled or an error
//
// Run joins the consumer group named by the application id with an eager
// range assignment, so one member holds partition N of every input topic,
// and builds one task per held partition number (package task). It fetches
// read_committed and hands every polled partition's records to its task's
// worker goroutine, which processes them in batches of at most
// MaxPollRecords. A task's transaction stays open across batches for
// CommitInterval (default 100ms): outputs are produced as they are
// computed, state writes stay in an in-memory overlay (the store only ever
// holds committed state), and the commit adds the changelog records (the
// last write per key of the whole transaction) and the input offsets, then
// applies the overlay to the store. Tasks commit independently; a task
// whose queue grows beyond a bound has its partitions paused until it
// drained.
//
// # Rebalances
//
// On assignment the new partitions are paused and each new task's producer
// fences the previous owner; the main loop then restores each task's store
// from its changelog partition and resumes its partitions. Partition
// positions come from the group's committed offsets, which the client reads
// with require-stable semantics after the fence. On revocation (or loss)
// every task finishes its in-flight batch and commits what it processed
// (records still queued are dropped; the next owner reads them again), then
// every task is torn down. Errors inside group callbacks end Run.
//
// # State directory
//
// Task N keeps its store in {StateDir}/{application id}/{N}, locked by the
// task for as long as it runs (see package store): instances on one host
// may share a state directory, but a store another process still holds (a
// paused zombie) is never wiped; the new owner waits up to 5s and then
// fails with store.ErrLocked. A store is kept after its task moves away and
// deleted once unused for StoreRetention (default 24h).
//
// # Transient broker faults
//
// A task whose transaction fails with a transient broker error (see
// TaskTimeout: a coordinator that moved or is restarting, a request that
// timed out, a network error, a rebalancing group on the offsets, an end of
// unknown outcome) does not end Run. The task is closed dirty (its
// transaction aborted; the store never held uncommitted state) and
// re-initialized in place by the main loop: a new producer fences its
// transactional ID, its store is restored warm from its checkpoint, and its
// partitions are re-positioned at the group's committed offsets, read with
// require-stable after the fence; records fetched for it meanwhile are
// dropped. The same holds for a newly assigned task whose fence or restore
// meets a transient error. A lost group session with a transient cause
// closes every task dirty (OnPartitionsLost commits nothing) and the
// member rejoins. Each recovery is logged at warn with its cause and
// counted (Stats.TaskRestarts). A task failing for longer than TaskTimeout
// without a commit, or a member that cannot rejoin for that long, ends Run
// with a *TaskTimeoutError.
//
// # Errors
//
// Run ends at the first error it does not ride out: a transform error
// (*transformer.ProcessError naming topic, partition and offset), a panic in
// the transform, the state-key function or a codec (recovered into a
// *transformer.ProcessError whose Err is a *flechtwerk.PanicError with the
// stack), a batch that outlived BatchTimeout (*BatchTimeoutError), a fence
// (fencing.ErrFenced: another instance owns the task now), a store still
// held by another process (store.ErrLocked), a missing ACL
// (flechtwerk.ErrNotAuthorized: the message names the operation and the
// resource the principal needs it on), a lost group session that is not
// transient, a *TaskTimeoutError, or a broker error that is not transient (a
// produce error names the record's topic and partition). The failed task's
// transaction is aborted, nothing of it (every batch since the task's last
// commit) is visible, and its offsets did not move; before Run returns,
// every task's producer aborts its open transaction, if any, and is closed.
// Restarting the process replays from the last committed offset. User code
// is never retried: let it crash, and let the orchestrator restart it.
//
// The one exception is an invalid record (*transformer.InvalidRecordError:
// a value the input codec cannot decode, or a record the transform
// rejected with transformer.Invalid): the InvalidRecords option chooses
// Crash (the default: Run ends with that error), Skip (its offset commits
// with the batch; counted in Stats), Substitute (a hook's value replaces
// it) or DeadLetter(topic) (the original record and KIP-1034 error headers
// go to topic in the batch's transaction, exactly once across crashes).
//
// Everything Run starts has exited when it returns, with one exception: a
// transform still running when its batch's BatchTimeout passed is abandoned
// (Go cannot stop a goroutine). Its results are discarded and it may run on
// until it returns or the process exits.
//
// # Stopping
//
// Canceling Run's context stops it gracefully: every task finishes its
// in-flight batch and commits what it processed (each bounded by
// BatchTimeout), producers and stores are closed, the member
// leaves the group, and Run returns nil.
package runner
