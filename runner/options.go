package runner

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/task/process"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// The option types. Each constructor takes the options of its stage kind:
// NewTransformer takes TransformerOpt, NewExtractor ExtractorOpt, NewSink
// SinkOpt and NewBridge BridgeOpt. An option's type says which kinds it
// applies to, so an option of another kind (InputTopics for an extractor)
// does not compile. Options of several kinds have a type that satisfies
// each of them: Opt (every kind), GroupOpt, StoreOpt, TxnOpt, InputOpt
// and ConfigTopicOpt. A slice of options of one kind is declared with the
// kind's type, e.g. []runner.TransformerOpt.
type (
	// TransformerOpt configures the runner of a transformer
	// (NewTransformer).
	TransformerOpt interface {
		apply(*config.Options)
		transformerOpt()
	}
	// ExtractorOpt configures the runner of an extractor (NewExtractor).
	ExtractorOpt interface {
		apply(*config.Options)
		extractorOpt()
	}
	// SinkOpt configures the runner of a sink (NewSink).
	SinkOpt interface {
		apply(*config.Options)
		sinkOpt()
	}
	// BridgeOpt configures the runner of an MQTT bridge (NewBridge).
	BridgeOpt interface {
		apply(*config.Options)
		bridgeOpt()
	}

	// Opt is an option of every stage kind: transformers, extractors,
	// sinks and bridges.
	Opt interface {
		TransformerOpt
		ExtractorOpt
		SinkOpt
		BridgeOpt
	}
	// GroupOpt is an option of the stages that consume through a
	// consumer group: transformers, extractors and sinks.
	GroupOpt interface {
		TransformerOpt
		ExtractorOpt
		SinkOpt
	}
	// StoreOpt is an option of the stages that keep stores and a
	// changelog: transformers (state) and extractors (cursors).
	StoreOpt interface {
		TransformerOpt
		ExtractorOpt
	}
	// TxnOpt is an option of the stages that write Kafka transactions:
	// transformers, extractors and bridges.
	TxnOpt interface {
		TransformerOpt
		ExtractorOpt
		BridgeOpt
	}
	// InputOpt is an option of the stages that read input topics:
	// transformers and sinks.
	InputOpt interface {
		TransformerOpt
		SinkOpt
	}
	// ConfigTopicOpt is an option of the stages driven by config topics:
	// extractors and bridges.
	ConfigTopicOpt interface {
		ExtractorOpt
		BridgeOpt
	}
)

// setter applies an option; the option types below add the marks of the
// kinds they apply to.
type setter func(*config.Options)

func (f setter) apply(c *config.Options) { f(c) }

type (
	isTransformer struct{}
	isExtractor   struct{}
	isSink        struct{}
	isBridge      struct{}
)

func (isTransformer) transformerOpt() {}
func (isExtractor) extractorOpt()     {}
func (isSink) sinkOpt()               {}
func (isBridge) bridgeOpt()           {}

// One concrete type per set of kinds, so that a type assertion cannot
// turn an option into one of a kind it does not apply to.
type (
	anyOpt struct {
		setter
		isTransformer
		isExtractor
		isSink
		isBridge
	}
	groupOpt struct {
		setter
		isTransformer
		isExtractor
		isSink
	}
	storeOpt struct {
		setter
		isTransformer
		isExtractor
	}
	txnOpt struct {
		setter
		isTransformer
		isExtractor
		isBridge
	}
	inputOpt struct {
		setter
		isTransformer
		isSink
	}
	configTopicOpt struct {
		setter
		isExtractor
		isBridge
	}
	tOpt struct {
		setter
		isTransformer
	}
	xOpt struct {
		setter
		isExtractor
	}
	sOpt struct {
		setter
		isSink
	}
)

// SeedBrokers sets the brokers to bootstrap from (Kafka's
// bootstrap.servers). Required.
func SeedBrokers(brokers ...string) Opt {
	return anyOpt{setter: func(c *config.Options) { c.Brokers = brokers }}
}

// ApplicationID names the application: the consumer group (which hands
// out the tasks of a transformer, the ownership tokens of an extractor, the
// partitions of a sink), the prefix of the transactional IDs ({id}-{N}; a
// bridge's is {id}-mqtt-{client id}), the changelog topic ({id}-changelog:
// state or cursors), the state directory, and a bridge's MQTT share group.
// Required; changing it starts
// from scratch (an extractor from empty cursors, a sink from the reset
// policy).
func ApplicationID(id string) Opt {
	return anyOpt{setter: func(c *config.Options) { c.ApplicationID = id }}
}

// InputTopics sets the topics to consume. Required. They must exist and have
// equal partition counts. Records of one state key run in this topic order,
// then offset order (a transformer). A sink reads them too.
func InputTopics(topics ...string) InputOpt {
	return inputOpt{setter: func(c *config.Options) { c.InputTopics = topics }}
}

// StateDir sets the root directory of the stores (a transformer's state,
// an extractor's cursors); task or token N of the application lives in
// {dir}/{application id}/{N}. Default $TMPDIR/flechtwerk. Stateless
// transformers create nothing there.
func StateDir(dir string) StoreOpt {
	return storeOpt{setter: func(c *config.Options) { c.StateDir = dir }}
}

// StoreRetention sets how long the store of a task this instance no longer
// runs is kept in the state directory: a kept store is what a warm restart
// of the task would start from. Stores of the application
// ({dir}/{application id}/{N}) unused for longer are deleted at the start
// of Run and then periodically (every retention/4, at least every minute
// and at most every hour); a store that is open, in this process or
// another, is never deleted. 0 deletes every store as soon as nobody holds
// it; negative keeps stores forever. Default 24h, Kafka's default
// delete.retention.ms: an older store cannot be trusted against its
// changelog anyway, since tombstones written after it may have been cleaned
// away.
func StoreRetention(d time.Duration) StoreOpt {
	return storeOpt{setter: func(c *config.Options) { c.StoreRetention = d }}
}

// MaxPollRecords caps the records of one batch (Kafka's max.poll.records):
// a transformer's batch, a sink's poll. Default 500.
func MaxPollRecords(n int) InputOpt {
	return inputOpt{setter: func(c *config.Options) { c.MaxPollRecords = n }}
}

// TransactionTimeout sets the producers' transaction timeout
// (transaction.timeout.ms): how long the broker lets a transaction of a
// silent owner stay open before aborting it. It must exceed BatchTimeout
// (a transformer) or PageTimeout (an extractor) and not exceed the broker's
// transaction.max.timeout.ms (15 minutes by default). Default 60s; 10s
// with SharedProducer.
func TransactionTimeout(d time.Duration) TxnOpt {
	return txnOpt{setter: func(c *config.Options) { c.TransactionTimeout, c.TransactionTimeoutSet = d, true }}
}

// BatchTimeout bounds the time one batch may take to process, and one
// commit of a task; a batch that takes longer fails Run with a
// *BatchTimeoutError (flechtwerk.ErrBatchTimeout) naming its task, and
// nothing of the task's open transaction is committed. Run does not wait for a transform that ignores its ctx: that
// goroutine is abandoned, its results are discarded, and it may run on
// until the process exits. Default 30s; 5s with SharedProducer.
// Rebalances wait for the in-flight batch, so keep it below the group's
// rebalance timeout (60s by default).
func BatchTimeout(d time.Duration) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.BatchTimeout, c.BatchTimeoutSet = d, true }}
}

// SharedProducer runs the transformer in the shared-producer mode (Kafka
// Streams' exactly_once_v2, KIP-447): one transactional producer per
// instance, and one transaction per commit interval spanning every task of
// the instance that wrote in it, instead of a producer and a transaction
// per task. It pays off with many partitions per instance: the broker
// handles one transaction per instance and interval, not one per task.
//
// What changes:
//   - Fencing is by the group: every transaction commits the offsets of
//     every task in it, with the group member's ID and generation, so the
//     transaction of an instance that lost its partitions is refused and
//     aborted. A task's new owner reads the committed offsets
//     require-stable (waiting for a transaction of the previous owner that
//     sent its offsets already), then restores its stores to the last
//     stable offset.
//   - A transaction of an instance that froze holds back its partitions'
//     last stable offset until the broker aborts it: the transaction
//     timeout is 10s unless TransactionTimeout is given, and BatchTimeout
//     5s unless given.
//   - One task's failure aborts the whole transaction: every task in it
//     replays from its committed offsets (re-initialized like a task after
//     a transient error), and a revocation commits the transaction of all
//     tasks before the revoked ones are released.
//
// The instance's transactional ID is "{application id}-shared-{n}", n
// random per Run. Every instance of an application must run the same
// mode; see docs/operations.md for switching modes.
func SharedProducer() TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.SharedProducer = true }}
}

// TaskTimeout bounds how long a task may stall on transient broker errors
// (Kafka Streams' task.timeout.ms). A task whose transaction fails with a
// transient error (a broker or coordinator that is restarting or moved, a
// request that timed out, a network error, a group that is rebalancing) is
// closed dirty, its transaction aborted, and re-initialized in place: it
// fences its transactional ID again, restores its store from its checkpoint
// and the changelog, and re-reads its input from the group's committed
// offsets; Run goes on. When a task has failed this way without one
// successful commit for longer than TaskTimeout, or the group member could
// not rejoin its group for that long, Run ends with a *TaskTimeoutError
// naming the task and the last cause. The startup steps after the cluster
// first answered (the changelog check and creation) are retried as long.
// Each recovery is logged at warn.
// Default 5 minutes.
func TaskTimeout(d time.Duration) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.TaskTimeout = d }}
}

// CommitInterval sets how long a task's transaction stays open: every
// record the task processes within the interval, across polls, joins it,
// and the transaction commits at the end of the interval its first record
// fell in (Kafka Streams' commit.interval.ms under exactly-once). The
// intervals are the run's, shared by every task (ticks every
// CommitInterval from the start of Run), so all tasks commit together and
// an output does not wait for other tasks' transactions. It also
// commits early when CommitMaxRecords or CommitMaxBytes is reached or its
// age nears TransactionTimeout, before a revocation and on a graceful stop.
// Changelog writes are deduplicated over the whole transaction. Offsets of
// an interval that wrote nothing commit once per interval through the group
// member. A longer interval gives fewer, larger transactions (throughput);
// a shorter one less latency to read_committed readers. It must be below
// TransactionTimeout. Default 100ms.
func CommitInterval(d time.Duration) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.CommitInterval = d }}
}

// CommitMaxRecords commits a task's transaction early once it holds this
// many input records. Default 100000.
func CommitMaxRecords(n int) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.CommitMaxRecords = n }}
}

// CommitMaxBytes commits a task's transaction early once its outputs and
// its state writes (keys and values, the last write per key) reach this
// many bytes; it bounds the memory of the in-memory state overlay too.
// Default 64 MiB.
func CommitMaxBytes(n int64) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.CommitMaxBytes = n }}
}

// MaxTimersPerBatch bounds how many due timers one batch of a task fires
// for keys that have no record in the batch, earliest first; the rest fire
// in the batches that follow, without waiting for records or the next
// commit interval. It bounds a batch's time and its share of the open
// transaction when many timers come due together (a restart after
// downtime, a TTL sweep of many idle keys), so that records keep flowing
// and the transaction commits at its interval. Timers of the keys of a
// batch's records always fire, however many. Default 10000.
func MaxTimersPerBatch(n int) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.MaxTimers = n }}
}

// StandbyReplicas sets how many standby replicas of each task the group
// keeps (Kafka Streams' num.standby.replicas). A standby replica is a warm
// copy of a task's store on an instance that does not run the task: it
// tails the task's changelog partition with read_committed isolation
// (never an aborted or uncommitted write) and applies each committed
// record to the store in its state directory, moving the store's
// checkpoint with it. When the task moves to that instance, its restore
// replays only what the standby had not applied yet instead of the whole
// changelog partition. Standbys write nothing to Kafka (no producer, no
// transaction, no offsets).
//
// It is meaningful with at least n+1 instances: each standby of a task
// lives on an instance other than the task's owner and other than its
// other standbys. A standby costs the instance a store's disk space and
// the changelog traffic of its task; one consumer client per instance
// tails all of its standby partitions. Which instance keeps which standby
// is decided by the group's balancer, which also hands a task that must
// move to the member whose store for it is furthest ahead. Default 0: no
// standbys. n > 0 needs a stateful transformer and a state directory.
func StandbyReplicas(n int) TransformerOpt {
	return tOpt{setter: func(c *config.Options) { c.StandbyReplicas = n }}
}

// Concurrency bounds the work a runner does at the same time: the
// state-key buckets that run their transforms, across all tasks, for a
// transformer (default 64); the polls, across all configs and tokens, for
// an extractor (default 16); the partitions whose batches are written at
// once, for a sink (default 64).
func Concurrency(n int) GroupOpt {
	return groupOpt{setter: func(c *config.Options) { c.Concurrency = n }}
}

// ChangelogReplicationFactor sets the replication factor of a changelog
// topic the runner creates. Default -1: the broker's
// default.replication.factor.
func ChangelogReplicationFactor(n int16) StoreOpt {
	return storeOpt{setter: func(c *config.Options) { c.Replication = n }}
}

// SessionTimeout sets the group session timeout (session.timeout.ms): how
// long the group waits for a silent member before moving its tasks or
// tokens. The heartbeat interval is a third of it, at most 3s. Default 10s.
func SessionTimeout(d time.Duration) GroupOpt {
	return groupOpt{setter: func(c *config.Options) { c.SessionTimeout = d }}
}

// WithKafkaOpts adds franz-go options to every client the runner creates:
// TLS, SASL, dialers, client id. Options that change delivery (isolation
// level, transactional id, partitioner, auto commit) are set by the runner
// and must not be passed.
func WithKafkaOpts(opts ...kgo.Opt) Opt {
	return anyOpt{setter: func(c *config.Options) { c.KafkaOpts = append(c.KafkaOpts, opts...) }}
}

// WithConsumerOpts adds franz-go options to the group member only, e.g.
// kgo.RebalanceTimeout or kgo.FetchMaxBytes. The runner's delivery
// settings — the group, its topics, its balancer (a transformer's
// cooperative, sticky, co-partitioning balancer; kgo's eager range
// balancer for an extractor or a sink), no auto-commit, the session and
// heartbeat, the partition callbacks, and for a transformer the isolation
// level, reset offset and rebalance blocking — are applied after them and
// cannot be replaced.
func WithConsumerOpts(opts ...kgo.Opt) GroupOpt {
	return groupOpt{setter: func(c *config.Options) { c.ConsumerOpts = append(c.ConsumerOpts, opts...) }}
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Opt {
	return anyOpt{setter: func(c *config.Options) { c.Logger = l }}
}

// ConfigTopics sets the config topics of an extractor: compacted topics
// whose live records are the poll targets. Required. They must exist and
// have equal partition counts; that count is the number of ownership
// tokens and of changelog partitions. A bridge (package mqttbridge) reads
// the configs of its topic filters from them.
func ConfigTopics(topics ...string) ConfigTopicOpt {
	return configTopicOpt{setter: func(c *config.Options) { c.ConfigTopics = topics }}
}

// PollInterval sets how often each live config is polled: a poll starts at
// most once per interval per config, and never while the previous poll of
// the config runs. Required.
func PollInterval(d time.Duration) ExtractorOpt {
	return xOpt{setter: func(c *config.Options) { c.PollInterval = d }}
}

// PageTimeout bounds one page of an extractor: the time from the start of
// a poll, or from its previous Commit, to the Commit that closes the page
// (or to the return of the poll function for the trailing page). A page
// that takes longer is aborted, its poll's context is canceled, and Run
// fails with an error naming the config key (errors.Is
// extractor.ErrPageTimeout). It must be below TransactionTimeout. Default
// 30s.
func PageTimeout(d time.Duration) ExtractorOpt {
	return xOpt{setter: func(c *config.Options) { c.PageTimeout = d }}
}

// CursorPolicy is what becomes of the cursor of a config whose record was
// tombstoned; see TombstonedCursors.
type CursorPolicy int

const (
	// DeleteCursors deletes the cursor of a tombstoned config: the owner
	// of its token writes a changelog tombstone in a transaction of the
	// token, like a page's cursor, and drops it from the store. A config
	// added again under the key starts from an empty cursor. The default.
	DeleteCursors CursorPolicy = iota
	// KeepCursors keeps the cursor of a tombstoned config in the
	// changelog and the store forever, so a config added again under the
	// key resumes where it stopped.
	KeepCursors
)

// TombstonedCursors sets what becomes of the cursor of a config whose record
// is tombstoned. Default DeleteCursors: a tombstone says the config is gone,
// and keeping its cursor would grow the changelog and every store with each
// config ever deleted, and make a new config that reuses the key (a new
// tenant with an old id) silently skip what the old one read. To stop a
// config for a while without losing its cursor, suspend it instead (see
// extractor.Suspended); use KeepCursors when configs are deleted and added
// again on purpose.
//
// Under DeleteCursors the cursor is deleted once the owner of the config's
// token sees the tombstone (after a running poll of the config ends), or,
// when the tombstone was written while no instance held the token, when an
// instance takes the token and its config table has read the config topics
// up to where they were after its fence (a config that table has not read
// yet is not taken for deleted). A config added again before its owner saw
// the tombstone keeps its cursor.
func TombstonedCursors(p CursorPolicy) ExtractorOpt {
	return xOpt{setter: func(c *config.Options) {
		c.KeepCursors, c.BadCursorPolicy = p == KeepCursors, nil
		if p != DeleteCursors && p != KeepCursors {
			v := int(p)
			c.BadCursorPolicy = &v
		}
	}}
}

// Invalid records.

// InvalidRecordPolicy is what becomes of an invalid record: a value that
// does not decode with the transformer's input codec, or a record its
// transform rejected (transformer.Invalid, transformer.ErrInvalidRecord);
// see InvalidRecords. It is one of Crash, Skip, DeadLetter(topic) and
// Substitute(hook).
type InvalidRecordPolicy struct {
	mode  process.Mode
	topic string
	hook  func(*transformer.InvalidRecordError) ([]byte, error)
}

var (
	// Crash ends Run with the record's *transformer.InvalidRecordError:
	// the task's batch is aborted and its offsets do not advance, so the
	// record comes back when the process restarts. The default.
	Crash = InvalidRecordPolicy{mode: process.Crash}
	// Skip drops the record: it produces nothing and changes no state,
	// and its offset commits with the rest of its batch. Skipped records
	// are counted (Stats) and logged at warn level with their topic,
	// partition, offset and error. Kafka Streams' LogAndContinue.
	Skip = InvalidRecordPolicy{mode: process.Skip}
)

// DeadLetter sends the record to topic and goes on: the original key,
// value and headers, plus headers with Kafka Streams' KIP-1034 names that
// say where it came from and why — __streams.errors.topic, .partition,
// .offset (decimal), .message (the error), .exception (the Go type of the
// cause, e.g. *json.SyntaxError), .stacktrace (the chain of causes, and
// the stack of a panic) — and __flechtwerk.errors.part (key, value or
// header). The dead-letter record is an output of the record's batch: it
// commits in the same transaction as the batch's other outputs, state and
// offsets, so each invalid record lands in topic exactly once, across
// crashes too. It is partitioned by the record key, like other outputs.
// topic must exist when Run starts (else Run fails with
// flechtwerk.CodeMissingTopic) and must not be an input or the changelog.
func DeadLetter(topic string) InvalidRecordPolicy {
	return InvalidRecordPolicy{mode: process.DeadLetter, topic: topic}
}

// Substitute runs the record again with the value hook returns in place
// of the invalid one (key, headers and location unchanged; decoded by the
// input codec like any value). A key is never substituted: an invalid key
// (transformer.InvalidKey) ends Run like Crash, and so does an error of
// hook, a substitute value that is invalid too, or one that changes the
// record's state key. hook runs concurrently for records of different
// state keys. Substituted records are counted (Stats) and logged.
func Substitute(hook func(*transformer.InvalidRecordError) ([]byte, error)) InvalidRecordPolicy {
	return InvalidRecordPolicy{mode: process.Substitute, hook: hook}
}

// InvalidRecords sets the policy for invalid records: Crash (the default),
// Skip, DeadLetter(topic) or Substitute(hook). Give it once: two different
// policies are an error of the constructor
// (flechtwerk.CodeInvalidRecordPolicy), as
// are DeadLetter("") and Substitute(nil).
//
// A sink (package sink) applies it too, to a value its codec does not
// decode and to a record its Expand step rejects with
// transformer.ErrInvalidRecord: Crash ends Run and nothing at or after the
// record commits; Skip releases the record at once, so its offset commits
// with the others; Substitute decodes the hook's value and hands it on.
// DeadLetter is at-least-once there, like the sink: the dead letter (same
// headers) is produced synchronously by an idempotent producer (acks=all)
// before the record is completed, so its offset commits only once the dead
// letter is durable; a crash in between writes it again on the restart.
func InvalidRecords(p InvalidRecordPolicy) InputOpt {
	return inputOpt{setter: func(c *config.Options) {
		c.InvalidRecords = append(c.InvalidRecords, config.InvalidRecords{Mode: p.mode, Topic: p.topic, Substitute: p.hook})
	}}
}

// Sink options. A sink's delivery mode is declared on the sink
// (sink.Delivery); these options must agree with it.

// CommitKeepalive sets how often an idle partition of an at-least-once
// sink re-commits its offset, so the broker's offset retention
// (offsets.retention.minutes, 7 days by default; its clock runs for groups
// without members) never expires a live service's position. Keep it well
// below the retention. Default 30 minutes. Given for an at-most-once sink it
// is a flechtwerk.CodeDeliveryConflict error.
func CommitKeepalive(d time.Duration) SinkOpt {
	return sOpt{setter: func(c *config.Options) {
		c.CommitKeepalive, c.CommitKeepaliveSet = d, true
	}}
}

// AutoCommitInterval sets the timer of an at-most-once sink: the offsets of
// what was polled are committed every interval, whether it was written or
// not (a crash loses what was polled and not written). Default 5s. Given for
// an at-least-once sink it is a flechtwerk.CodeDeliveryConflict error.
func AutoCommitInterval(d time.Duration) SinkOpt {
	return sOpt{setter: func(c *config.Options) {
		c.AutoCommitInterval, c.AutoCommitIntervalSet = d, true
	}}
}
