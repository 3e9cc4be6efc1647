// Package flechtwerk holds what every part of Flechtwerk shares: the Record
// and Header every stage reads (transformer.Record, configtopic.Record and
// the Header of every stage package are these types), the configuration
// error type and the stable codes it carries, and the PanicError of
// recovered user code. It imports no other package of the module.
//
// Flechtwerk processes Kafka streams with exactly-once delivery. Users write
// a transformer (package transformer) or an extractor (package extractor),
// a sink (package sink) for a system outside Kafka, or an MQTT bridge
// (package mqttbridge), and run it with package runner. Each task commits its outputs, its
// state changelog writes and its input offsets in one Kafka transaction, so
// a read_committed reader sees every input's effect exactly once across
// crashes, restarts, rebalances and zombies.
//
// # The data path (read this first)
//
// The runner's constructor of the stage's kind (runner.NewTransformer,
// NewExtractor, NewSink, NewBridge; an option's type keeps it to the kinds
// it applies to) checks the options (internal/config: defaults, checks of
// the values and the names derived from the application id) and finds the
// engine's view of the stage through internal/stage: every stage type
// embeds an unexported handle on its engine view (no registry, no
// init-time state), so the stage packages export only what users call.
//
// A transformer: Run joins the consumer group {application id} over the
// input topics with the project's cooperative, sticky, co-partitioning
// balancer (internal/group), so one member holds partition N of every
// input; that is task N (package task). A rebalance moves only the tasks
// that must move.
//
//  1. On assignment, task.Start opens the task's producer with the static
//     transactional ID {application id}-{N} (internal/txn over package
//     fencing): initializing it fences every previous owner and aborts
//     its open transaction.
//  2. task.Restore opens the store {state dir}/{application id}/{N}
//     (package store, Pebble) and rebuilds it from partition N of the
//     changelog topic {application id}-changelog (package changelog,
//     reading to the last stable offset with internal/lso).
//  3. The main loop polls and queues each partition's records at its
//     task's worker; task.Process runs the batch semantics
//     once (internal/batch: input-topic then offset order, buckets by state
//     key run concurrently, one key serially with its state threaded
//     through, last write per key) calling the user's transform, reading
//     state from the open transaction's overlay, else the store.
//  4. task.Add joins the batch to the task's open transaction
//     (internal/txn: outputs produced at once, results checked at the
//     end; state writes into the overlay); once per CommitInterval
//     task.CommitOpen adds the changelog records and the offsets
//     (AddOffsetsToTxn + TxnOffsetCommit) and ends it (abort on any
//     failure); only then is the store updated. An interval that wrote
//     nothing commits its offsets through the group member.
//
// An extractor (internal/engine/extract): the group over the config topics
// hands out ownership tokens, one per partition number; token N fences
// {application id}-{N} and restores its cursor store from changelog
// partition N, like a task. The config topics are read in full by a
// configtopic.Table; the scheduler polls each live config owned by a held
// token once per PollInterval, and a page (the records a poll sent, and its
// cursor as a changelog write) commits through the same internal/txn path.
//
// # Errors
//
// Every configuration problem is reported before anything runs, as a
// *ConfigError whose Code is stable across releases; match it with
// errors.Is against the sentinel of the same code:
//
//	if errors.Is(err, flechtwerk.ErrMissingTopic) { ... }
//
// The runner constructors and Run report every problem they find at once
// (errors.Join).
package flechtwerk
