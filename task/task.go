package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/restore"
	"github.com/flechtwerk/flechtwerk/internal/tracing"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// Config describes one task.
type Config struct {
	ApplicationID string
	Partition     int32
	// InputTopics in order: records of one state key run in this topic
	// order, then offset order.
	InputTopics []string
	// TopicIDs of the input topics, for TxnOffsetCommit v6+.
	TopicIDs map[string][16]byte
	// OffsetsMetadata is the commit metadata of the task's input offsets
	// (changelog.StoresMetadata of its named stores and timer store).
	OffsetsMetadata string
	// Changelog topic; empty for stateless processors.
	Changelog string
	// StateDir is the root of all stores.
	StateDir           string
	TransactionTimeout time.Duration
	// KafkaOpts are added to every client the task creates (brokers, TLS, SASL).
	KafkaOpts []kgo.Opt
	Logger    *slog.Logger
	// Member returns the member ID and generation of the consumer group
	// member that owns the task (kgo.Client.GroupMetadata of the runner's
	// group client). Every transaction's offsets carry it (KIP-447): the
	// group coordinator refuses them when that member left the group or
	// its generation is stale, as it refuses the member's own offset
	// commits, so a zombie that holds the task's newest producer epoch but
	// not the group's current generation cannot commit. Required to
	// commit offsets.
	Member func() (memberID string, generation int32)
	// Policy decides what becomes of the invalid records of every batch
	// (and counts them); nil is Crash.
	Policy *process.Policy
	// TracerProvider, when not nil, traces the task's records and
	// commits (the spans of runner.WithTracerProvider); nil is tracing
	// off. Propagator reads and writes the trace context of record
	// headers (nil: W3C trace context).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// MaxTimers bounds the due timers of keys without records one batch
	// fires, earliest first (0 or less: 10000); Batch.MoreDue reports the
	// rest.
	MaxTimers int
	// Lane, when set, is the shared-producer mode's lane of the task's
	// instance (NewLane): the task opens no producer and fences nothing;
	// its transactions are the lane's, joined by Add and ended by the
	// lane's owner for every task at once (Prepare, then Lane.End, then
	// Committed).
	Lane *Lane
}

// Task is one running task.
type Task struct {
	cfg      Config
	producer *txn.Producer
	proc     process.Processor
	// sp is proc when it keeps named stores or timers (process.Stores).
	sp process.Stores
	// stores are the default store (nil: stateless) and the named
	// stores, in the order of sp.Stores(); topics their changelogs.
	stores []*store.Store
	topics []string
	names  []string
	// timers is the timer store (nil: the processor sets no timers),
	// timersTopic its changelog.
	timers      *store.Store
	timersTopic string
	// stream is the task's stream time: of what it committed and its
	// open transaction (Unix ms; 0 before any record).
	stream int64
	// position is the next offset per input topic of the last commit
	// (or SetPosition's): what a transaction of timers alone commits.
	position map[string]int64
	tracer   *tracing.Tracer // nil: tracing off
	topicIdx map[string]int

	// mu guards closed against the producer and the store: Commit and
	// store reads hold it shared, Close exclusively. A batch abandoned by
	// the runner (BatchTimeout) may finish after Close; it then finds the
	// task closed and touches neither.
	mu     sync.RWMutex
	closed bool

	// open is what was processed and not committed; only the goroutine
	// that runs the task's batches touches it (and reads it, from the
	// buckets of a batch, while no batch is added or committed).
	open open
	// last is the default store's overlay of the last transaction
	// committed and applied when a write of it carried a stamp (nil:
	// none), touched as open is: getStamped reads it in the default
	// store's place, values and stamps.
	last    map[string]store.Write
	commits atomic.Int64
	// reads counts the store reads of batches in progress.
	reads reads
}

// ErrClosed is returned by Commit (and by Process for a store read) after
// Close: the task was torn down, for instance because its batch outlived
// BatchTimeout and was abandoned. Nothing of the batch was produced.
var ErrClosed = errors.New("task: closed")

// Start creates the task's transactional producer and fences every previous
// owner of its transactional ID (step 1); with Config.Lane it does
// neither. It opens no store yet.
func Start(ctx context.Context, cfg Config, proc process.Processor) (*Task, error) {
	// Records go out as soon as they are computed; they batch up behind
	// the requests in flight per broker anyway. The user's options come
	// after and win. A produce that kgo retries only after a metadata
	// refresh (NOT_ENOUGH_REPLICAS from Kafka's partition verification
	// when concurrent produce requests add partitions, a stale leader)
	// waits for at most the producer's MetadataMinAge: fencing.Init sets
	// it (20ms) after every caller option, so it holds for every task
	// producer.
	opts := append([]kgo.Opt{kgo.ProducerLinger(0)}, cfg.KafkaOpts...)
	rt, names, topics, timersTopic := routing(cfg, proc)
	t := &Task{cfg: cfg, proc: proc, topics: topics, names: names, timersTopic: timersTopic}
	if sp, ok := proc.(process.Stores); ok {
		t.sp = sp
	}
	t.open = newOpen(len(t.topics))
	t.stores = make([]*store.Store, len(t.topics))
	var p *txn.Producer
	if cfg.Lane == nil {
		var err error
		p, err = txn.OpenRouted(ctx, config.TransactionalID(cfg.ApplicationID, cfg.Partition), cfg.TransactionTimeout, rt, opts...)
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", cfg.Partition, err)
		}
	}
	idx := make(map[string]int, len(cfg.InputTopics))
	for i, t := range cfg.InputTopics {
		idx[t] = i
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t.cfg, t.producer, t.topicIdx = cfg, p, idx
	t.tracer = tracing.New(cfg.TracerProvider, cfg.Propagator, cfg.ApplicationID)
	return t, nil
}

// routing returns the routing of a task of proc, and the names and
// changelogs of its stores (the default one first) and of its timers
// (empty: none).
func routing(cfg Config, proc process.Processor) (rt txn.Routing, names, topics []string, timersTopic string) {
	rt = txn.Routing{Changelog: cfg.Changelog}
	names, topics = []string{""}, []string{cfg.Changelog}
	if sp, ok := proc.(process.Stores); ok {
		for _, s := range sp.Stores() {
			names = append(names, s.Name)
			topics = append(topics, changelog.StoreTopic(cfg.ApplicationID, s.Name))
		}
		rt.Stores = append(rt.Stores, topics[1:]...)
		if sp.Timers() {
			timersTopic = changelog.TimersTopic(cfg.ApplicationID)
			rt.Stores = append(rt.Stores, timersTopic)
		}
	}
	if ep, ok := proc.(explicit); ok && ep.ExplicitPartitions() {
		// Its outputs with a partition (0 or more) go to it; the
		// others (-1) to their topic's partitioner.
		rt.Explicit = true
	}
	if pp, ok := proc.(partitioned); ok {
		rt.ByTopic = pp.Partitioners()
	}
	return rt, names, topics, timersTopic
}

// partitioned is a Processor whose output topics have partitioners of
// their own (a transformer stage's Partitioner options), by topic.
type partitioned interface {
	Partitioners() map[string]func(key []byte, partitions int32) int32
}

// explicit is a Processor whose outputs' Partition says where they go
// (a transformer stage): -1 for the partitioner, 0 or more for that
// partition. Other processors' outputs are all partitioned.
type explicit interface {
	ExplicitPartitions() bool
}

// Partition returns the task's partition number.
func (t *Task) Partition() int32 { return t.cfg.Partition }

// Store returns the task's default store, nil for stateless tasks or
// before Restore.
func (t *Task) Store() *store.Store { return t.stores[0] }

// NamedStore returns the task's store of the processor's named store
// name, nil when there is none or before Restore.
func (t *Task) NamedStore(name string) *store.Store {
	for i, n := range t.names {
		if i > 0 && n == name {
			return t.stores[i]
		}
	}
	return nil
}

// TimerStore returns the task's timer store, nil when its processor sets
// no timers or before Restore.
func (t *Task) TimerStore() *store.Store { return t.timers }

// StreamTime returns the task's stream time (Unix ms; 0 before any
// record): of what it committed and its open transaction.
func (t *Task) StreamTime() int64 { return t.stream }

// Restore opens the task's stores and brings each up to its changelog's
// last stable offset (step 2): the default store (a stateful processor),
// every named store and the timer store (a process.Stores processor).
// Each restores warm, replaying only its changelog after the store's
// checkpoint, when the store left in the directory is usable, or is
// wiped and restored in full (changelog.Recover says when). The producer
// fenced every previous owner in Start, so every changelog's last stable
// offset is final for it; the restore first waits for the transactions
// open on each changelog partition under other IDs to end (a lane's,
// which nothing fences; in the default mode, one left by an instance of
// the shared-producer mode). It logs one "task restored" line per store with the
// number of records replayed, whether the restore was full and why. The
// task's stream time is the timer store's. Stateless tasks without named
// stores or timers do nothing.
func (t *Task) Restore(ctx context.Context, adm *kadm.Client) error {
	type spec struct {
		i     int // index in stores; -1: timers
		dir   string
		topic string
	}
	var specs []spec
	if t.proc.Stateful() {
		specs = append(specs, spec{0, config.StoreDir(t.cfg.StateDir, t.cfg.ApplicationID, t.cfg.Partition), t.cfg.Changelog})
	}
	for i := 1; i < len(t.names); i++ {
		specs = append(specs, spec{i, store.NamedDir(t.cfg.StateDir, t.cfg.ApplicationID, t.cfg.Partition, t.names[i]), t.topics[i]})
	}
	if t.timersTopic != "" {
		specs = append(specs, spec{-1, store.NamedDir(t.cfg.StateDir, t.cfg.ApplicationID, t.cfg.Partition, TimersStore), t.timersTopic})
	}
	for _, sp := range specs {
		st, err := store.Open(ctx, sp.dir, store.Options{ApplicationID: t.cfg.ApplicationID, Logger: t.cfg.Logger, Timers: sp.i < 0})
		if err != nil {
			return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
		}
		if sp.i < 0 {
			t.timers = st
		} else {
			t.stores[sp.i] = st
		}
		began := time.Now()
		// The fence settled the transactions of the task's ID, not those
		// of another ID (a lane of the shared-producer mode, or a task
		// of it after a switch of modes): they must end first.
		if err := restore.Settle(ctx, adm, sp.topic, t.cfg.Partition); err != nil {
			return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
		}
		res, err := changelog.Recover(ctx, adm, sp.topic, t.cfg.Partition, st, t.cfg.KafkaOpts...)
		if err != nil {
			return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
		}
		t.cfg.Logger.Info("task restored", "partition", t.cfg.Partition, "changelog", sp.topic,
			"records", res.Records, "from", res.From, "to", res.To, "full", res.Full, "reason", res.Reason,
			"took", time.Since(began))
	}
	if t.timers != nil {
		t.stream, _ = t.timers.StreamTime()
	}
	return nil
}

// TimersStore is the reserved name of the timer store: its directory is
// store.NamedDir(stateDir, application id, partition, TimersStore).
const TimersStore = changelog.TimersName

// Close aborts the producer's open transaction, if any (bounded by a
// timeout; if the abort cannot reach the broker, the next owner's fence or
// the transaction timeout aborts it: the failed abort is logged at warn and
// not returned, for nothing of the transaction can become visible after
// it), closes the producer and closes the store. It waits for a Commit in progress (bounded by the commit's
// deadline and its abort), but not for a Process: a batch still running
// user code finds the task closed when it gets to the store or to Commit,
// and produces nothing. A second Close is a no-op.
func (t *Task) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	// Reads of a batch still running finish first, then find the
	// task closed.
	t.closeReads()
	var errs []error
	t.open = newOpen(len(t.stores)) // an open transaction is aborted below
	if t.producer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), txn.AbortTimeout)
		// A no-op when no transaction is open.
		if err := t.producer.Abort(ctx); err != nil {
			// The transaction never commits: it ends aborted by the
			// next fence of the transactional ID (this task's own
			// re-initialization, or the next owner) or by the broker's
			// transaction timeout.
			t.cfg.Logger.Warn("task closed without confirming the abort of its open transaction; the next fence or the transaction timeout aborts it",
				"partition", t.cfg.Partition, "transactional_id", t.producer.ID(), "err", err)
		}
		cancel()
		t.producer.Close()
		t.producer = nil
	}
	for i, st := range append(t.stores, t.timers) {
		if st == nil {
			continue
		}
		if err := st.Close(); err != nil {
			errs = append(errs, err)
		}
		if i < len(t.stores) {
			t.stores[i] = nil
		}
	}
	t.timers = nil
	return errors.Join(errs...)
}

// Commit makes a non-empty batch visible in one transaction: its outputs,
// its changelog writes and its offsets. On success the store is updated.
// On error the transaction was aborted (or its outcome is unknown and the
// broker will abort it when the next owner fences); nothing of it is visible
// to read_committed readers, and the task must not be used again.
func (t *Task) Commit(ctx context.Context, b *Batch) error {
	if b.Empty() {
		return fmt.Errorf("task %d: Commit of an empty batch; commit its offsets through the group member", t.cfg.Partition)
	}
	if t.sp != nil {
		return fmt.Errorf("task %d: Commit of a batch of a processor with named stores or timers; use Add and CommitOpen", t.cfg.Partition)
	}
	// Ending a transaction must not be cut off by the caller's
	// cancellation: an end whose outcome is unknown costs a fence.
	// Its deadline stays: the caller's batch deadline bounds the commit
	// (and so the time a rebalance waits for it); without one, the
	// transaction timeout does.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(t.cfg.TransactionTimeout)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return fmt.Errorf("task %d: batch not committed: %w", t.cfg.Partition, ErrClosed)
	}
	if t.producer == nil {
		return fmt.Errorf("task %d: batch not committed: its transactions are its lane's (Config.Lane); Add, then Prepare", t.cfg.Partition)
	}
	recs := make([]*kgo.Record, 0, len(b.outputs)+len(b.writes))
	recs = append(recs, b.outputs...)
	for _, w := range b.writes {
		recs = append(recs, changelog.Record(t.cfg.Changelog, t.cfg.Partition, w))
	}
	tm, err := t.producer.Commit(ctx, recs, &txn.Offsets{
		Group:    t.cfg.ApplicationID,
		Next:     txn.Of(t.cfg.Partition, b.Offsets),
		TopicIDs: t.cfg.TopicIDs,
		Metadata: t.cfg.OffsetsMetadata,
		Member:   t.cfg.Member,
	})
	if err != nil {
		// Aborted, or of unknown outcome (a failed end): the store is
		// rebuilt from the changelog on restart either way.
		return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
	}
	t.commits.Add(1)
	t.cfg.Logger.Debug("transaction committed", "partition", t.cfg.Partition,
		"records", b.Records, "outputs", len(b.outputs), "state_writes", len(b.writes),
		"produce", tm.Produce, "offsets", tm.Offsets, "total", tm.Total)
	if st := t.stores[0]; st != nil {
		var err error
		if next, ok := changelog.NextOffset(recs, t.cfg.Changelog, t.cfg.Partition); ok {
			err = st.ApplyThrough(b.writes, next)
		} else {
			err = st.Apply(b.writes)
		}
		if err != nil {
			return fmt.Errorf("task %d: transaction committed but the store update failed (restored from the changelog on restart): %w", t.cfg.Partition, err)
		}
	}
	return nil
}
