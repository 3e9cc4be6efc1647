package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/stage"
	"github.com/flechtwerk/flechtwerk/store"
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
	// Changelog topic; empty for stateless processors.
	Changelog string
	// StateDir is the root of all stores.
	StateDir           string
	TransactionTimeout time.Duration
	// KafkaOpts are added to every client the task creates (brokers, TLS, SASL).
	KafkaOpts []kgo.Opt
	Logger    *slog.Logger
}

// Task is one running task.
type Task struct {
	cfg      Config
	txnID    string
	producer *kgo.Client
	store    *store.Store
	proc     stage.Transformer
	topicIdx map[string]int

	// mu guards closed against the producer and the store: Commit and
	// store reads hold it shared, Close exclusively. A batch abandoned by
	// the runner (BatchTimeout) may finish after Close; it then finds the
	// task closed and touches neither.
	mu     sync.RWMutex
	closed bool
}

// ErrClosed is returned by Commit (and by Process for a store read) after
// Close: the task was torn down, for instance because its batch outlived
// BatchTimeout and was abandoned. Nothing of the batch was produced.
var ErrClosed = errors.New("task: closed")

// Start creates the task's transactional producer and fences every previous
// owner of its transactional ID (step 1). It opens no store yet.
func Start(ctx context.Context, cfg Config, proc stage.Transformer) (*Task, error) {
	txnID := fencing.TransactionalID(cfg.ApplicationID, cfg.Partition)
	opts := append(slices.Clone(cfg.KafkaOpts), kgo.RecordPartitioner(partitioner{changelog: cfg.Changelog}))
	cl, err := fencing.Init(ctx, txnID, cfg.TransactionTimeout, opts...)
	if err != nil {
		return nil, fmt.Errorf("task %d: %w", cfg.Partition, err)
	}
	idx := make(map[string]int, len(cfg.InputTopics))
	for i, t := range cfg.InputTopics {
		idx[t] = i
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Task{cfg: cfg, txnID: txnID, producer: cl, proc: proc, topicIdx: idx}, nil
}

// Partition returns the task's partition number.
func (t *Task) Partition() int32 { return t.cfg.Partition }

// Store returns the task's store, nil for stateless tasks or before Restore.
func (t *Task) Store() *store.Store { return t.store }

// Restore opens a fresh store and rebuilds it from the changelog (step 2).
// Stateless tasks do nothing.
func (t *Task) Restore(ctx context.Context, adm *kadm.Client) error {
	if !t.proc.Stateful() {
		return nil
	}
	st, err := store.Open(ctx, store.Dir(t.cfg.StateDir, t.cfg.ApplicationID, t.cfg.Partition), store.Options{Logger: t.cfg.Logger})
	if err != nil {
		return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
	}
	t.store = st
	began := time.Now()
	n, err := changelog.Restore(ctx, adm, t.cfg.Changelog, t.cfg.Partition, st, t.cfg.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("task %d: %w", t.cfg.Partition, err)
	}
	t.cfg.Logger.Info("task restored", "partition", t.cfg.Partition, "changelog", t.cfg.Changelog,
		"records", n, "took", time.Since(began))
	return nil
}

// Close aborts the producer's open transaction, if any (bounded by a
// timeout; if the abort cannot reach the broker, the next owner's fence or
// the transaction timeout aborts it), closes the producer and closes the
// store. It waits for a Commit in progress (bounded by the commit's
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
	var errs []error
	if t.producer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
		if err := t.producer.AbortBufferedRecords(ctx); err != nil {
			errs = append(errs, fmt.Errorf("task %d: abort buffered records: %w", t.cfg.Partition, err))
		} else if err := t.producer.EndTransaction(ctx, kgo.TryAbort); err != nil {
			// A no-op when no transaction is open.
			errs = append(errs, fmt.Errorf("task %d: abort open transaction: %w", t.cfg.Partition, fencing.Classify(t.txnID, err)))
		}
		cancel()
		t.producer.Close()
		t.producer = nil
	}
	if err := t.store.Close(); err != nil {
		errs = append(errs, err)
	}
	t.store = nil
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
	cl := t.producer

	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("task %d: begin transaction: %w", t.cfg.Partition, fencing.Classify(t.txnID, err))
	}
	recs := make([]*kgo.Record, 0, len(b.outputs)+len(b.writes))
	recs = append(recs, b.outputs...)
	for _, w := range b.writes {
		recs = append(recs, changelog.Record(t.cfg.Changelog, t.cfg.Partition, w))
	}
	// The offsets join the transaction while the records are produced:
	// neither depends on the other, and the commit below waits for both.
	began := time.Now()
	var offDur time.Duration
	offsetsErr := make(chan error, 1)
	go func() {
		err := t.sendOffsets(ctx, b.Offsets)
		offDur = time.Since(began)
		offsetsErr <- err
	}()
	produceErr := firstProduceErr(cl.ProduceSync(ctx, recs...))
	prodDur := time.Since(began)
	offErr := <-offsetsErr
	if produceErr != nil {
		return t.abort(ctx, fmt.Errorf("task %d: %w", t.cfg.Partition, fencing.Classify(t.txnID, produceErr)))
	}
	if offErr != nil {
		return t.abort(ctx, fmt.Errorf("task %d: offsets to transaction: %w", t.cfg.Partition, fencing.Classify(t.txnID, offErr)))
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// Unknown outcome: retry the end as an abort. If the commit did
		// land, the abort fails and the error still ends the task: the
		// store is rebuilt from the changelog on restart.
		return t.abort(ctx, fmt.Errorf("task %d: commit: %w", t.cfg.Partition, fencing.ClassifyCommit(t.txnID, err)))
	}
	t.cfg.Logger.Debug("transaction committed", "partition", t.cfg.Partition,
		"records", b.Records, "outputs", len(b.outputs), "state_writes", len(b.writes),
		"produce", prodDur, "offsets", offDur, "total", time.Since(began))
	if t.store != nil {
		if err := t.store.Apply(b.writes); err != nil {
			return fmt.Errorf("task %d: transaction committed but the store update failed (restored from the changelog on restart): %w", t.cfg.Partition, err)
		}
	}
	return nil
}

// firstProduceErr returns the error of the first failed record, naming
// its topic and partition (a record that failed before the partitioner
// ran, e.g. to a topic the broker does not know, has none).
func firstProduceErr(rs kgo.ProduceResults) error {
	var (
		first  *kgo.ProduceResult
		failed int
	)
	for i := range rs {
		if rs[i].Err != nil {
			if first == nil {
				first = &rs[i]
			}
			failed++
		}
	}
	if first == nil {
		return nil
	}
	r := first.Record
	where := fmt.Sprintf("topic %s partition %d", r.Topic, r.Partition)
	if r.Partition < 0 {
		where = fmt.Sprintf("topic %s (no partition assigned)", r.Topic)
	}
	return fmt.Errorf("produce to %s failed (%d of %d records of the transaction failed): %w", where, failed, len(rs), first.Err)
}

func (t *Task) abort(ctx context.Context, cause error) error {
	// The commit's context may be spent (that may be why we abort): the
	// abort gets its own time, so that it reaches the broker.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	cl := t.producer
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("task %d: abort buffered records: %w", t.cfg.Partition, err))
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return errors.Join(cause, fmt.Errorf("task %d: abort: %w", t.cfg.Partition, fencing.Classify(t.txnID, err)))
	}
	return cause
}

// abortTimeout bounds an abort; when it cannot finish, the next owner's
// fence or the transaction timeout aborts the transaction instead.
const abortTimeout = 10 * time.Second

// sendOffsets adds the group's offsets to the open transaction:
// AddOffsetsToTxn then TxnOffsetCommit, with generation -1 and no member id
// (the producer is not the group member).
func (t *Task) sendOffsets(ctx context.Context, offsets map[string]int64) error {
	id, epoch, err := t.producer.ProducerID(ctx)
	if err != nil {
		return err
	}
	group := t.cfg.ApplicationID

	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID = t.txnID
	add.ProducerID = id
	add.ProducerEpoch = epoch
	add.Group = group
	if err := retry(ctx, func() error {
		resp, err := add.RequestWith(ctx, t.producer)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("AddOffsetsToTxn: %w", err)
	}

	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID = t.txnID
	req.Group = group
	req.ProducerID = id
	req.ProducerEpoch = epoch
	req.Generation = -1
	req.MemberID = ""
	topics := make([]string, 0, len(offsets))
	for topic := range offsets {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	for _, topic := range topics {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rt.TopicID = t.cfg.TopicIDs[topic]
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition = t.cfg.Partition
		rp.Offset = offsets[topic]
		rp.LeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	return retry(ctx, func() error {
		resp, err := req.RequestWith(ctx, t.producer)
		if err != nil {
			return err
		}
		for i, rt := range resp.Topics {
			name := rt.Topic
			if name == "" && i < len(topics) {
				name = topics[i]
			}
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("TxnOffsetCommit %s/%d: %w", name, rp.Partition, err)
				}
			}
		}
		return nil
	})
}

// retry runs fn until it succeeds, fails with a non-retryable error, or ctx
// ends. CONCURRENT_TRANSACTIONS (the previous transaction's markers are
// still being written) is retryable here.
func retry(ctx context.Context, fn func() error) error {
	backoff := 2 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.ConcurrentTransactions) && !kerr.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// partitioner sends changelog records to their explicit partition and hashes
// every other record's key like Kafka's default partitioner.
type partitioner struct{ changelog string }

var (
	manual = kgo.ManualPartitioner()
	hashed = kgo.StickyKeyPartitioner(nil)
)

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.changelog && topic != "" {
		return manual.ForTopic(topic)
	}
	return hashed.ForTopic(topic)
}
