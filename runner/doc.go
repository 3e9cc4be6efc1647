// Package runner runs a stage with the delivery its kind promises: a
// transformer (package transformer) or an extractor (package extractor)
// exactly-once, a sink (package sink) at-least-once or at-most-once, an
// MQTT bridge (package mqttbridge) into Kafka transactions. It is the
// facade: the constructors, Run, Wake, the options, State, Healthy,
// Ready, Stats and the queries (Get, Range); one engine per stage kind
// does the work. Each kind has its constructor, taking the options of
// that kind:
//
//	NewTransformer(t, ...TransformerOpt)
//	NewExtractor(x, ...ExtractorOpt)
//	NewSink(s, ...SinkOpt)
//	NewBridge(b, ...BridgeOpt)
//
// An option's type says which kinds it applies to: Opt (every kind:
// SeedBrokers, ApplicationID, WithLogger, ...), GroupOpt, StoreOpt,
// TxnOpt, InputOpt and ConfigTopicOpt (several kinds), or one kind's type
// (BatchTimeout is a TransformerOpt, PollInterval an ExtractorOpt). An
// option of another kind does not compile. The constructor checks the
// stage and the option values, reports every problem at once as coded
// *flechtwerk.ConfigError values, and does no I/O.
//
// A Pipeline runs several stages in one process with one Run, one
// health view and a shared logger and metrics registry; each stage keeps
// its own application id and commits on its own. Repartition declares the
// internal topic a re-keying stage sends to and the next stage reads:
//
//	p, err := runner.NewPipeline("wordcount", runner.SeedBrokers(b), runner.WithLogger(log))
//	words := p.Repartition("words", "wc-split", "wc-count", 0)
//	_, err = p.AddTransformer(split, runner.ApplicationID("wc-split"), runner.InputTopics("sentences"))
//	_, err = p.AddTransformer(count, runner.ApplicationID("wc-count"), runner.InputTopics(words))
//	err = p.Run(ctx)
//
// See package extractor for how an extractor runs, package sink for sinks
// and package mqttbridge for the bridge; the rest of this page is about
// transformers.
//
//	r, err := runner.NewTransformer(counter,
//		runner.SeedBrokers("localhost:9092"),
//		runner.ApplicationID("wordcount"),
//		runner.InputTopics("words"),
//	)
//	if err != nil { ... }          // every configuration problem, coded
//	err = r.Run(ctx)                // until ctx is canceled or an error
//
// Run joins the consumer group named by the application id with a
// cooperative, sticky, co-partitioning balancer (internal/group), so one
// member holds partition N of every input topic, and builds one task per
// held partition number (package task). It fetches
// read_committed and hands every polled partition's records to its task's
// worker goroutine, which processes them in batches of at most
// MaxPollRecords. A task's transaction stays open across batches for
// CommitInterval (default 100ms): outputs are produced as they are
// computed, state writes stay in an in-memory overlay (the store only ever
// holds committed state), and the commit adds the changelog records (the
// last write per key of the whole transaction) and the input offsets, then
// applies the overlay to the store. Every task commits at the same ticks
// of the run (every CommitInterval from the start of Run), each with its
// own transaction: all tasks write to the same output partitions, whose
// last stable offset (what read_committed readers wait for) is held back
// by the oldest transaction open on the partition, of any task; commits at
// ticks of their own would keep some task's transaction open nearly all
// the time. A task whose queue grows beyond a bound has its partitions
// paused until it drained.
//
// # Rebalances
//
// Rebalances are incremental (KIP-429's cooperative protocol): only the
// tasks that move are stopped and started; every other task keeps its
// worker, producer, store and open transaction and goes on processing
// while the group rebalances. A task that moves from one instance to
// another is first revoked (in a rebalance of its own) and then assigned
// (in the rebalance its previous owner's rejoin starts), so no two
// instances hold it at once.
//
// On revocation (or loss) of a task its worker finishes its in-flight
// chunk and commits what the task processed (its open transaction, or the
// offsets of an interval that wrote nothing; records still queued are
// dropped and the next owner reads them again), a restore of it in
// progress is cut short (a start in progress is waited for: a fence cut
// short could still reach the broker after the next owner's), and it is
// closed. On assignment the new partitions are paused and each new task
// starts on its own goroutine, beside the running tasks: its producer
// fences the previous owner, it restores its store from its changelog
// (one restore at a time), it reads its partitions' committed offsets
// (require-stable, after the fence, so they are those of the previous
// owner's last transaction), and its partitions are positioned there and
// resume. Rebalance callbacks run between polls (kgo's
// BlockRebalanceOnPoll): no polled records are in the main loop's hands
// while they run, and fetching pauses for as long as they take (a revoked
// task's commit; an assignment is bookkeeping only), while the workers go
// on with what they queued. Errors inside group callbacks end Run.
//
// A transformer with named stores (transformer.Stores) or timers
// (timers, StateTTL) has a store and a changelog per named store
// ({application id}-{name}-changelog) and a timer store
// ({application id}-timers-changelog; it also holds the task's stream
// time, so every such transformer has it) beside the default ones: Run
// creates or checks each like the default changelog (same partitions and
// configuration), every task restores each after its fence, and its
// transactions write all of them. An application that adds a store or
// timers keeps its default changelog and state; the new stores start
// empty. The input offsets name the stores in their commit metadata, so a
// store's changelog lost once offsets named it is CHANGELOG_MISSING at
// start, as a lost default changelog is. The worker of a task with timers wakes for its next wall-clock
// timer when it has no records and runs a batch without records that
// fires it (and whatever else is due), so a wall-clock timer fires within
// about a commit interval of its due time, idle or not; event-time timers
// fire as records advance the task's stream time, and the idle worker
// also ticks while event-time timers are due by it (a batch fires at most
// MaxTimersPerBatch timers of keys without records; a callback that sets
// its timer again in the past fires in the next tick, at least 10ms
// later).
//
// The balance is computed by the group's leader (client side), not by the
// broker (KIP-848): broker-side assignors see only subscriptions and owned
// partitions, while the balancer also weighs the changelog offsets of the
// stores each member holds locally, for standby replicas and to send a
// moving task where its store is closest to the end. An instance of an
// earlier version (eager range assignment) shares no protocol with this
// one and cannot join the same group: upgrade by stopping every instance
// of the old version first, or run the new version under a new
// application id.
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
// # Standby replicas
//
// With StandbyReplicas(n), instances keep warm copies of the stores of
// tasks they do not run (package internal/standby): each standby tails its
// task's changelog partition with read_committed isolation, one consumer
// client (no group) per instance for all its standbys, and applies every
// committed record to the store in the instance's state directory, the
// store's checkpoint moving in the same Pebble batch; records of aborted
// or open transactions are never applied. A standby starts like a task's
// restore (warm from the store's checkpoint when it is usable, else wiped
// and restored in full) and never ends. Before a task starts on an
// instance that keeps a standby of it, the standby is released (its store
// closed and unlocked) and the task opens the store warm: its restore
// replays only the standby's lag. Standbys write nothing to Kafka. A
// standby whose position fell out of the partition's range or whose
// changelog was recreated is wiped and restored; any other error of a
// standby ends Run, naming the changelog topic and partition. Standbys
// hold their stores' locks: instances that share a state directory must
// not run standbys (a task moving to one would find its store locked by
// the other's standby).
//
// Which instance keeps which standby is decided by the group's balancer
// (internal/group; never the task's owner, never two standbys of a task
// on one member, the members furthest ahead in the task's changelog
// first) and handed to each member with its assignment; each member
// reports the changelog offsets of the stores it holds open (its tasks'
// and its standbys') in its join metadata, so a task that must move goes
// to a member with a warm standby of it. The standby set is applied after
// every assignment and revocation: a task revoked here may become a
// standby here, reusing the store it just closed.
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
// leaves the group, and Run returns nil. A final commit that fails with
// a fence (another member owns the task already) or a transient broker
// error is aborted and logged at warn, and Run still returns nil: nothing
// of that transaction is visible, its offsets did not move, and the next
// owner reprocesses its records, as after a crash.
package runner
